package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
)

// The operator commands with --db work on a store whose tables have
// another prefix (serve's store.table_prefix) when told it: they saw an
// empty store, and enqueue wrote into tables no serve reads.
func TestDBCommandsTakeTheTablePrefix(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b.db")
	st, err := sqlite.Open(context.Background(), path, store.Config{TablePrefix: "myapp_"})
	if err != nil {
		t.Fatal(err)
	}
	m := &outbox.Message{Destination: "hook", Type: "order.created"}
	if err := st.Enqueue(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	_ = st.Close()
	out := mustCLI(t, "--db", "sqlite:"+path, "--table-prefix", "myapp_", "messages", "list")
	if !strings.Contains(out, m.ID.String()) {
		t.Fatalf("messages list with --table-prefix myapp_ does not show %s:\n%s", m.ID, out)
	}
	if _, err := cli(t, "--db", "sqlite:"+path, "--table-prefix", "My-App", "messages", "list"); err == nil ||
		!strings.Contains(err.Error(), "--table-prefix") {
		t.Fatalf("a bad --table-prefix: %v, want an error naming it", err)
	}
}

// An operator command with --db on a database that has tables, none of
// them Backstop's under the prefix, is refused naming --table-prefix: it
// created a second set of empty tables and listed nothing. A new database
// is still created on first use.
func TestDBCommandsRefuseADatabaseWithoutTheirTables(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b.db")
	st, err := sqlite.Open(context.Background(), path, store.Config{TablePrefix: "myapp_"})
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Close()
	_, err = cli(t, "--db", "sqlite:"+path, "messages", "list")
	if err == nil || !strings.Contains(err.Error(), "none of them backstop_outbox") || !strings.Contains(err.Error(), "--table-prefix") {
		t.Fatalf("messages list without the prefix: %v, want a refusal naming --table-prefix", err)
	}
	check, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer check.Close()
	var n int
	if err := check.QueryRow(`SELECT count(*) FROM sqlite_master WHERE name LIKE 'backstop\_%' ESCAPE '\'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d backstop_ tables created (%v), want none", n, err)
	}
	fresh := filepath.Join(t.TempDir(), "new.db")
	mustCLI(t, "--db", "sqlite:"+fresh, "enqueue", "--destination", "hook", "--type", "t")

	// PostgreSQL: a schema holding other tables.
	testenv.PostgresAdmin(t)
	schema := testenv.NewSchema(t, "prefix_")
	db := withSearchPath(testenv.PostgresURL(), schema)
	conn, err := pgx.Connect(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `CREATE TABLE orders (id int)`); err != nil {
		t.Fatal(err)
	}
	if _, err := cli(t, "--db", db, "dlq", "list"); err == nil || !strings.Contains(err.Error(), "--table-prefix") {
		t.Fatalf("dlq list on a schema without Backstop's tables: %v, want a refusal", err)
	}
	mustCLI(t, "migrate", "--db", db)
	mustCLI(t, "--db", db, "dlq", "list")
}

// The refusal holds in a schema whose name needs quoting (upper case, a
// space), as a search_path may name it: the check cast the schema's name
// to regnamespace, which folds it to lower case and fails, and a failed
// check let the command create a second set of tables beside the others.
func TestDBCommandsRefuseASchemaWithoutTheirTablesWhateverItsName(t *testing.T) {
	a := testenv.PostgresAdmin(t)
	ctx := context.Background()
	schema := "Prefix Upper_" + rand.Text()[:12]
	ident := pgx.Identifier{schema}.Sanitize()
	if _, err := a.Exec(ctx, "CREATE SCHEMA "+ident+"; CREATE TABLE "+ident+".orders (id int)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := a.Exec(context.Background(), "DROP SCHEMA "+ident+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", ident, err)
		}
	})
	db := withSearchPath(testenv.PostgresURL(), url.PathEscape(ident))
	if _, err := cli(t, "--db", db, "dlq", "list"); err == nil || !strings.Contains(err.Error(), "--table-prefix") {
		t.Fatalf("dlq list on a schema without Backstop's tables: %v, want a refusal", err)
	}
	var n int
	if err := a.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = $1`, schema).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d tables in %q (%v), want only orders", n, schema, err)
	}
	mustCLI(t, "migrate", "--db", db)
	mustCLI(t, "--db", db, "dlq", "list")
}
