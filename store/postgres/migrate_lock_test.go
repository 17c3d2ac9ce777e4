package postgres

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop/store"
)

// schemaAt returns a store on a fresh schema, and the schema, holding the
// migrations up to version, as a Backstop of that version left it.
func schemaAt(t *testing.T, version int, cfg store.Config) (*Store, string) {
	t.Helper()
	ctx := context.Background()
	schema := newSchema(t)
	pool := schemaPool(t, schema, 4)
	s, err := New(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := store.LoadMigrations(migrationFiles, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE `+s.n.migrations+` (version integer PRIMARY KEY, name text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	r := strings.NewReplacer("{{T}}", schema+"."+s.n.prefix, "{{P}}", s.n.prefix)
	for _, m := range ms {
		if m.Version > version {
			break
		}
		sql, indexes, err := splitMigration(r.Replace(m.SQL), schema)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range append([]string{sql}, plainIndexes(indexes)...) {
			if _, err := pool.Exec(ctx, q); err != nil {
				t.Fatalf("migration %d: %v", m.Version, err)
			}
		}
		if _, err := pool.Exec(ctx, `INSERT INTO `+s.n.migrations+` (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
			t.Fatal(err)
		}
	}
	return s, schema
}

// plainIndexes are the statements that build indexes in a transaction.
func plainIndexes(ix []migrationIndex) []string {
	out := make([]string, len(ix))
	for i, x := range ix {
		out[i] = x.plain()
	}
	return out
}

// syncBuffer is a log destination for a store that logs from another
// goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *syncBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// A migration that must wait for a table an application's transaction
// holds (an insert into the outbox not yet committed) does not hold up
// the application's other writes meanwhile: it waited for the lock with
// no bound, and every insert into the outbox queued behind its request
// until the application's transaction ended, however long. It now gives
// up the lock after migrationLockTimeout, says so, and tries again; it
// applies once the transaction ends.
func TestMigrationWaitingForALockDoesNotHoldUpWriters(t *testing.T) {
	ctx := context.Background()
	logs := &syncBuffer{}
	s, schema := schemaAt(t, 26, store.Config{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	app, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = app.Rollback(ctx) }()
	if _, err := app.Exec(ctx, `INSERT INTO backstop_outbox (destination, type) VALUES ('app', 't')`); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Migrate(ctx) }()

	// Once the migration waits for the outbox, a writer gets through
	// within the lock timeout and a little more.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting bool
		if err := admin(t).QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks
			WHERE NOT granted AND relation = $1::regclass)`, schema+".backstop_outbox").Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the migration never waited for the outbox")
		}
	}
	wctx, cancel := context.WithTimeout(ctx, migrationLockTimeout+3*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := s.pool.Exec(wctx, `INSERT INTO backstop_outbox (destination, type) VALUES ('writer', 't')`); err != nil {
		t.Fatalf("a writer while the migration waits: %v after %s", err, time.Since(start).Round(time.Millisecond))
	}
	if err := app.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Migrate: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Migrate did not end after the application's transaction did")
	}
	if v, err := s.SchemaVersion(ctx); err != nil || v != LatestSchemaVersion() {
		t.Fatalf("SchemaVersion %d (%v), want %d", v, err, LatestSchemaVersion())
	}
	if got := logs.String(); !strings.Contains(got, "level=WARN") || !strings.Contains(got, "lock") {
		t.Fatalf("nothing logged of the wait: %q", got)
	}
}
