package sqlite

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// TestCloseEndsTheBackgroundPrepares: the first writes of a store prepare
// statements on the writer in the background (cachedStmt). Close waits for
// them, so the writer's connection closes with the store: the last
// connection gone, SQLite folds the -wal file into the database and
// removes it and the -shm file, as a process that exits next needs (the
// CLI: `backstop enqueue --db` left both behind in 4 of 6 runs, and a
// user who may not write the directory could not read the database
// read-only). Nor does a closed store keep a cached statement.
func TestCloseEndsTheBackgroundPrepares(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for i := range 10 {
		path := filepath.Join(t.TempDir(), "b.db")
		s, err := Open(ctx, path, store.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Enqueue(ctx, &outbox.Message{Destination: "orders", Stream: "s", Type: "t"}); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{path + "-wal", path + "-shm"} {
			if _, err := os.Stat(f); err == nil {
				t.Fatalf("run %d: %s left behind by a closed store", i, filepath.Base(f))
			}
		}
		writerStmts.Range(func(k, _ any) bool {
			if k.(stmtKey).s == s {
				t.Fatalf("run %d: a closed store keeps a cached statement", i)
			}
			return true
		})
	}
}
