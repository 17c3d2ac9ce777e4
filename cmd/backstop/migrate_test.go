package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/store/postgres"
	"github.com/backstophq/backstop/store/sqlite"
)

// migrate says which schema version the store is at, and, on a store a
// newer Backstop migrated, that nothing was applied, on SQLite as on
// PostgreSQL: on SQLite it said "migrated" (a rolled-back binary's
// operator took the store for up to date).
func TestMigrateSaysTheSchemaVersion(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b.db")
	out := mustCLI(t, "migrate", "--db", "sqlite:"+path)
	if want := fmt.Sprintf("schema version %d", sqlite.LatestSchemaVersion()); !strings.Contains(out, want) {
		t.Fatalf("migrate on a new SQLite database: %q, want %q", out, want)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO backstop_migrations (version, name, applied_at) VALUES (9999, 'from_the_future', 0)`); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	out = mustCLI(t, "migrate", "--db", "sqlite:"+path)
	if !strings.Contains(out, "schema version 9999 is newer than this backstop's") || strings.Contains(out, "migrated") {
		t.Fatalf("migrate on a newer SQLite schema: %q", out)
	}

	testenv.PostgresAdmin(t)
	url := withSearchPath(testenv.PostgresURL(), testenv.NewSchema(t, "migrate_"))
	out = mustCLI(t, "migrate", "--db", url)
	if want := fmt.Sprintf("schema version %d", postgres.LatestSchemaVersion()); !strings.Contains(out, want) {
		t.Fatalf("migrate on a new PostgreSQL schema: %q, want %q", out, want)
	}
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `INSERT INTO backstop_migrations (version, name) VALUES (9999, 'from_the_future')`); err != nil {
		t.Fatal(err)
	}
	out = mustCLI(t, "migrate", "--db", url)
	if !strings.Contains(out, "schema version 9999 is newer than this backstop's") || strings.Contains(out, "migrated") {
		t.Fatalf("migrate on a newer PostgreSQL schema: %q", out)
	}
}

// Once migrate has run as the tables' owner, serve and the --db commands
// work as a role that may use the tables but not create any (PostgreSQL):
// each opened the store by creating its version tables IF NOT EXISTS,
// which needs the right to create in the schema even when they exist,
// and migrate did not make the workflow tables, which serve opens.
func TestDBCommandsAsARoleThatMayNotChangeTheSchema(t *testing.T) {
	a := testenv.PostgresAdmin(t)
	ctx := context.Background()
	schema := testenv.NewSchema(t, "dml_")
	owner := withSearchPath(testenv.PostgresURL(), schema)
	mustCLI(t, "migrate", "--db", owner)

	role := "backstop_dml_" + strings.ToLower(rand.Text()[:12])
	if _, err := a.Exec(ctx, `CREATE ROLE `+role+` NOLOGIN`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := a.Exec(context.Background(), `DROP OWNED BY `+role+`; DROP ROLE `+role); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	if _, err := a.Exec(ctx, `GRANT USAGE ON SCHEMA `+schema+` TO `+role+`;
		GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA `+schema+` TO `+role+`;
		GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA `+schema+` TO `+role); err != nil {
		t.Fatal(err)
	}
	app := owner + "&options=-c%20role%3D" + role // the session takes the role
	mustCLI(t, "--db", app, "enqueue", "--destination", "hook", "--type", "t")
	if out := mustCLI(t, "--db", app, "messages", "list"); !strings.Contains(out, "hook") {
		t.Fatalf("messages list as the role:\n%s", out)
	}
	mustCLI(t, "--db", app, "workflows", "runs", "list")
	mustCLI(t, "migrate", "--db", app)
}
