package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
)

// TestCommitsReachTheDisk: the writer commits with synchronous=FULL, so
// a commit that returned survives a power loss. It was NORMAL, which in
// WAL mode syncs only at checkpoints: a machine crash could take back an
// Enqueue the application was told had committed, and an inbox message
// already acknowledged to its broker. WithRelaxedDurability asks for
// NORMAL.
func TestCommitsReachTheDisk(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		opts []sqlite.Option
		want int
	}{
		{"default", nil, 2},
		{"relaxed", []sqlite.Option{sqlite.WithRelaxedDurability()}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "b.db"), store.Config{}, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			var got int
			if err := st.DB().QueryRowContext(ctx, "PRAGMA synchronous").Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("PRAGMA synchronous on the writer = %d, want %d", got, tc.want)
			}
		})
	}
}
