package sqlite

import (
	"context"
	"database/sql"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/store"
)

// logSignal is a log destination that signals each line holding want.
type logSignal struct {
	want string
	seen chan struct{}
}

func (w *logSignal) Write(p []byte) (int, error) {
	if strings.Contains(string(p), w.want) {
		select {
		case w.seen <- struct{}{}:
		default:
		}
	}
	return len(p), nil
}

// A process opening a database that another process is migrating (its
// write lock held, as by a migration of many rows, which takes seconds)
// waits for it and opens the database migrated, saying that it waits.
// Two serve started together on a large SQLite file: the second failed
// with "database busy" after the lock wait (5 s), blaming a transaction
// begun on DB().
func TestOpenWaitsForAnotherProcessMigrating(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b.db")
	other, err := sql.Open("sqlite", path+"?_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(context.Background(), `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	logs := &logSignal{want: "waits for the database's write lock", seen: make(chan struct{}, 1)}
	opened := make(chan error, 1)
	go func() {
		s, err := Open(context.Background(), path, store.Config{Logger: slog.New(slog.NewTextHandler(logs, nil))},
			WithLockWait(100*time.Millisecond))
		if err == nil {
			defer s.Close()
			var v int
			if v, err = s.SchemaVersion(context.Background()); err == nil && v != LatestSchemaVersion() {
				t.Errorf("schema version %d, want %d", v, LatestSchemaVersion())
			}
		}
		opened <- err
	}()
	select {
	case <-logs.seen:
	case err := <-opened:
		t.Fatalf("Open while another process holds the write lock: %v, want it to wait", err)
	case <-time.After(30 * time.Second):
		t.Fatal("nothing logged of the wait")
	}
	if _, err := conn.ExecContext(context.Background(), `COMMIT`); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-opened:
		if err != nil {
			t.Fatalf("Open once the other process let go: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Open did not return once the lock was free")
	}
}
