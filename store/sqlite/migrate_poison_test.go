package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/store"
)

// TestMigrationKeepsOldBadRows: rows written before migration 0003's
// checks, which break them, do not make the migration fail; the first
// batch quarantines each and claims the good ones.
func TestMigrationKeepsOldBadRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := store.LoadMigrations(migrationFiles, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE backstop_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Version > 2 {
			break
		}
		if _, err := db.Exec(strings.ReplaceAll(m.SQL, "{{prefix}}", "backstop_")); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(`INSERT INTO backstop_migrations VALUES (?, ?, 0)`, m.Version, m.Name); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []string{
		`INSERT INTO backstop_outbox (destination, type, status) VALUES ('d', 't', 'abc')`,
		`INSERT INTO backstop_outbox (destination, type) VALUES ('d', 'good')`,
		`INSERT INTO backstop_outbox (destination, type, attempts) VALUES ('d', 't', 'x')`,
		`INSERT INTO backstop_outbox (destination, stream, type, scheduled_for) VALUES ('d', 's', 't', 'tomorrow')`,
		`INSERT INTO backstop_outbox (destination, stream, type) VALUES ('d', 's', 'good')`,
		`INSERT INTO backstop_outbox (destination, type, headers) VALUES ('d', 't', '"x"')`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()

	s, err := Open(ctx, path, store.Config{})
	if err != nil {
		t.Fatalf("Open (migrating over old bad rows): %v", err)
	}
	defer s.Close()
	r, err := s.ProcessBatch(ctx, &store.Batch{Instance: store.Instance{ID: "i"}, Claim: store.ClaimRequest{Limit: 10}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Quarantined) != 4 {
		t.Fatalf("quarantined %d rows, want 4", len(r.Quarantined))
	}
	// the text scheduled_for held stream s (strict): once quarantined, its
	// dead letter holds it instead, in plain sight, until released
	if len(r.Claimed) != 1 || r.Claimed[0].Type != "good" || r.Claimed[0].Stream != "" {
		t.Fatalf("claimed %+v, want the good message without a stream", r.Claimed)
	}
	st, err := s.StreamStatus(ctx, "d", "s")
	if err != nil || !st.Blocked || st.Why == "" {
		t.Fatalf("StreamStatus = %+v, %v; want blocked by the dead letter", st, err)
	}
	if n, err := s.ReleaseStream(ctx, "d", "s"); err != nil || n != 1 {
		t.Fatalf("ReleaseStream = %d, %v", n, err)
	}
	r, err = s.ProcessBatch(ctx, &store.Batch{Instance: store.Instance{ID: "i"}, Claim: store.ClaimRequest{Limit: 10}})
	if err != nil || len(r.Claimed) != 1 || r.Claimed[0].Stream != "s" {
		t.Fatalf("after release: %+v, %v", r, err)
	}
	reason := errorhandling.ReasonSerializationError
	list, err := s.DLQ().List(ctx, nil)
	if err != nil || len(list) != 4 {
		t.Fatalf("dead letters: %d, %v", len(list), err)
	}
	for _, e := range list {
		if e.Reason != reason || !strings.Contains(e.ErrorMessage, "column ") {
			t.Fatalf("entry %+v", e)
		}
	}
}
