package main

import (
	"context"
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
