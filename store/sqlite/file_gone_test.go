package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// TestDatabaseFileRemovedOrReplacedUnderTheStore: the database file is
// removed (rm backstop.db*, a clean-up script, a volume re-provisioned) or
// replaced (a backup moved over it) while the store has it open. SQLite
// goes on with the file it opened, which no other process can see and
// which is gone when this one exits. Before, the store went on as if
// nothing had happened: Enqueue committed 10 messages into the removed
// file, claims leased them, and Get (serve's /readyz store check) said the
// store was fine, while a backstop --db command saw an empty database at
// the path and a restart lost every message. Now writes fail, matching
// store.ErrUnavailable, and so does Get, naming the file.
func TestDatabaseFileRemovedOrReplacedUnderTheStore(t *testing.T) {
	t.Parallel()
	for _, replace := range []bool{false, true} {
		name := "removed"
		if replace {
			name = "replaced"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, path := openTemp(t, store.Config{})
			m := func() *outbox.Message {
				return &outbox.Message{Destination: "d", Stream: "s", Type: "t", Payload: []byte(`{}`)}
			}
			if err := s.Enqueue(ctx, m()); err != nil {
				t.Fatal(err)
			}
			for _, suffix := range []string{"", "-wal", "-shm"} {
				if err := os.Remove(path + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
					t.Fatal(err)
				}
			}
			if replace {
				other := filepath.Join(t.TempDir(), "other.db")
				o, err := Open(ctx, other, store.Config{})
				if err != nil {
					t.Fatal(err)
				}
				if err := o.Close(); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(other, path); err != nil {
					t.Fatal(err)
				}
			}
			err := s.Enqueue(ctx, m())
			if !errors.Is(err, store.ErrUnavailable) {
				t.Errorf("Enqueue into a database file %s under the store: %v, want an error matching store.ErrUnavailable", name, err)
			}
			_, err = s.ProcessBatch(ctx, &store.Batch{Instance: store.Instance{ID: "i"}, Claim: store.ClaimRequest{Limit: 10}})
			if !errors.Is(err, store.ErrUnavailable) {
				t.Errorf("claim from a database file %s under the store: %v, want an error matching store.ErrUnavailable", name, err)
			}
			if _, err := s.Get(ctx, uuid.Nil); !errors.Is(err, store.ErrUnavailable) {
				t.Errorf("Get (serve's readiness check) with the database file %s: %v, want an error matching store.ErrUnavailable", name, err)
			}
		})
	}
}

// TestDatabaseFileOpenedAsAURIIsWatched: a database opened by a file: URI
// opens and is written as before, and its removal is noticed as well.
func TestDatabaseFileOpenedAsAURIIsWatched(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "uri.db")
	s, err := Open(ctx, "file:"+path, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m := &outbox.Message{Destination: "d", Type: "t", Payload: []byte(`{}`)}
	if err := s.Enqueue(ctx, m); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := s.Enqueue(ctx, &outbox.Message{Destination: "d", Type: "t", Payload: []byte(`{}`)}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Enqueue after the file was removed: %v, want an error matching store.ErrUnavailable", err)
	}
}

// TestLogFileRemovedUnderTheStoreLosesNothing: the database's -wal file
// (what was committed since SQLite last copied it into the database) or
// its -shm file (the log's index and locks) is removed while the store
// runs. Before, the store went on committing into the removed -wal file:
// killed then, a process lost every message it had reported committed
// (35 of 35, and the schema), and another process could not read the
// database meanwhile (disk I/O error); with the -shm file removed, a
// second process made an index of its own, and the two lost 5 of 40
// committed messages between them. Now the store copies the removed
// log into the database file, which a kill leaves holding every
// committed message, and writes and reads by id fail as the store
// unavailable, naming the file.
func TestLogFileRemovedUnderTheStoreLosesNothing(t *testing.T) {
	t.Parallel()
	for _, suffix := range []string{"-wal", "-shm"} {
		t.Run(suffix, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, path := openTemp(t, store.Config{})
			m := func() *outbox.Message {
				return &outbox.Message{Destination: "d", Stream: "s", Type: "t", Payload: []byte(`{}`)}
			}
			const committed = 10
			for range committed {
				if err := s.Enqueue(ctx, m()); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Remove(path + suffix); err != nil {
				t.Fatal(err)
			}
			err := s.Enqueue(ctx, m())
			if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "backstop.db"+suffix) {
				t.Errorf("Enqueue with the %s file removed: %v, want an error matching store.ErrUnavailable naming the file", suffix, err)
			}
			_, err = s.ProcessBatch(ctx, &store.Batch{Instance: store.Instance{ID: "i"}, Claim: store.ClaimRequest{Limit: 10}})
			if !errors.Is(err, store.ErrUnavailable) {
				t.Errorf("claim with the %s file removed: %v, want an error matching store.ErrUnavailable", suffix, err)
			}
			if _, err := s.Get(ctx, uuid.Nil); !errors.Is(err, store.ErrUnavailable) {
				t.Errorf("Get (serve's readiness check) with the %s file removed: %v, want an error matching store.ErrUnavailable", suffix, err)
			}
			if suffix != "-wal" {
				return
			}
			// What a kill of the process leaves: the database file alone,
			// read without its -wal file (immutable). Read through SQLite,
			// which keeps the file's locks, not os.ReadFile, whose close
			// would drop them.
			db, err := sql.Open("sqlite", "file:"+path+"?immutable=1")
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			var n int
			if err := db.QueryRow(`SELECT count(*) FROM backstop_outbox`).Scan(&n); err != nil || n != committed {
				t.Fatalf("the database file holds %d messages (%v), want the %d committed before the -wal file was removed", n, err, committed)
			}
		})
	}
}
