package postgres

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/store"
)

// The concurrent parts of the migrations hold only index builds, each
// with a plain form for a transaction; anything else there is refused.
func TestMigrationsConcurrentParts(t *testing.T) {
	ms, err := store.LoadMigrations(migrationFiles, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	r := strings.NewReplacer("{{T}}", `"s".backstop_`, "{{P}}", "backstop_")
	var names []string
	for _, m := range ms {
		sql, ix, err := splitMigration(r.Replace(m.SQL), `"s"`)
		if err != nil {
			t.Fatalf("migration %d: %v", m.Version, err)
		}
		if strings.Contains(sql, concurrentMarker) || strings.Contains(strings.ToUpper(sql), "INDEX CONCURRENTLY") {
			t.Fatalf("migration %d: its transaction's part builds concurrently", m.Version)
		}
		for _, x := range ix {
			if p := x.plain(); strings.Contains(p, "CONCURRENTLY") || !strings.HasPrefix(p, "CREATE INDEX IF NOT EXISTS ") {
				t.Fatalf("migration %d: plain form %q", m.Version, p)
			}
			if !strings.HasPrefix(x.table, `"s".backstop_`) {
				t.Fatalf("migration %d: table %q", m.Version, x.table)
			}
			names = append(names, x.name)
		}
	}
	// buildIndexes builds these whenever they are missing: a later
	// migration must not drop one.
	for _, m := range ms {
		for _, n := range names {
			bare := n[strings.LastIndex(n, ".")+1:]
			if strings.Contains(r.Replace(m.SQL), "DROP INDEX "+`"s".`+bare) || strings.Contains(m.SQL, "DROP INDEX {{T}}"+strings.TrimPrefix(bare, "backstop_")) {
				t.Fatalf("migration %d drops %s, which a concurrent part builds", m.Version, bare)
			}
		}
	}
	if len(names) != 10 || names[7] != `"s".backstop_outbox_dead_hold_idx` {
		t.Fatalf("concurrent indexes %v", names)
	}
	if _, _, err := splitMigration("SELECT 1;\n"+concurrentMarker+"\nALTER TABLE x ADD COLUMN y int;\n", `"s"`); err == nil ||
		!strings.Contains(err.Error(), "ALTER TABLE x") {
		t.Fatalf("a statement other than an index build in the concurrent part: %v", err)
	}
}

// An upgrade that adds an index to a large outbox no longer stops the
// application's writes while it builds it. The build ran in the
// migration's transaction (a plain CREATE INDEX, which holds the table
// against inserts for as long as it reads it, about a second a million
// rows, and until every later migration has run): here, with an
// application's insert left open, the migration could not commit at all,
// 0032's index waiting for the insert's lock. It now commits, and builds
// the index CONCURRENTLY afterwards: writers go on while it waits for the
// open transaction and while it reads the table.
func TestMigrationBuildsALargeTablesIndexWithoutHoldingItsWriters(t *testing.T) {
	ctx := context.Background()
	logs := &syncBuffer{}
	s, schema := schemaAt(t, 31, store.Config{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	s.indexInTxUpTo = 0 // every table with a row is "large"
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

	idx := schema + ".backstop_outbox_dead_hold_idx"
	deadline := time.Now().Add(20 * time.Second)
	for {
		v, err := s.SchemaVersion(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var building bool // the concurrent build's index, not yet valid
		if err := admin(t).QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_index
			WHERE indexrelid = to_regclass($1) AND NOT indisvalid)`, idx).Scan(&building); err != nil {
			t.Fatal(err)
		}
		if v == LatestSchemaVersion() && building {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("with an application's insert open, the migration is at version %d (want %d) and the index not building",
				v, LatestSchemaVersion())
		}
		time.Sleep(20 * time.Millisecond) // polling another server's state
	}
	// The build waits for the open insert; a writer is not held.
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := s.pool.Exec(wctx, `INSERT INTO backstop_outbox (destination, type) VALUES ('writer', 't')`); err != nil {
		t.Fatalf("a writer while the index builds: %v", err)
	}
	select {
	case err := <-done:
		t.Fatalf("Migrate returned (%v) before the open transaction ended", err)
	default:
	}
	if err := app.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Migrate: %v", err)
		}
	case <-time.After(2 * time.Minute):
		// a concurrent build waits for every transaction of the database
		// older than it, other packages' tests' too
		t.Fatal("Migrate did not end after the application's transaction did")
	}
	var valid bool
	if err := admin(t).QueryRow(ctx, `SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)`, idx).Scan(&valid); err != nil || !valid {
		t.Fatalf("index valid %v (%v)", valid, err)
	}
	if got := logs.String(); !strings.Contains(got, "building an index concurrently") {
		t.Fatalf("nothing logged of the build: %q", got)
	}
}

// An index an interrupted build left invalid (the process stopped, the
// statement cancelled), or missing, is built again by the next Migrate:
// before, a schema at the latest version was left as it was, and reads
// went on without the index for good.
func TestMigrationBuildsAgainAnIndexLeftInvalid(t *testing.T) {
	ctx := context.Background()
	s, err := openTest(t, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var schema string
	if err := s.pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	hold, dead := schema+".backstop_outbox_dead_hold_idx", schema+".backstop_dead_letters_reason_idx"
	if _, err := admin(t).Exec(ctx, `UPDATE pg_index SET indisvalid = false WHERE indexrelid = to_regclass($1)`, hold); err != nil {
		t.Fatal(err)
	}
	if _, err := admin(t).Exec(ctx, `DROP INDEX `+dead); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	for _, idx := range []string{hold, dead} {
		var valid bool
		if err := admin(t).QueryRow(ctx, `SELECT coalesce((SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)), false)`,
			idx).Scan(&valid); err != nil || !valid {
			t.Fatalf("%s valid %v (%v) after Migrate", idx, valid, err)
		}
	}
}
