package wfpostgres_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/postgres"
	"github.com/backstophq/backstop/workflow/wfpostgres"
	"github.com/backstophq/backstop/workflow/wfstore"
	"github.com/backstophq/backstop/workflow/wfstore/wfstoretest"
)

// open returns a migrated PostgreSQL store and its workflow store in a new
// schema of the test server (skipped when it is unreachable, failed under
// CI=true).
func open(t *testing.T, cfg store.Config) (*postgres.Store, *wfpostgres.Store, string) {
	t.Helper()
	ctx := context.Background()
	schema := testenv.NewSchema(t, "wf_")
	st, err := postgres.New(testenv.PostgresAdmin(t), cfg, postgres.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	ws, err := wfpostgres.New(ctx, st, wfpostgres.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	return st, ws, schema
}

func TestConformance(t *testing.T) {
	t.Parallel()
	wfstoretest.Run(t, wfstoretest.Harness{New: func(t *testing.T) (wfstore.Store, func(string) int) {
		st, ws, schema := open(t, store.Config{})
		return ws, func(typ string) int {
			var n int
			q := `SELECT count(*) FROM ` + schema + `.backstop_outbox WHERE type = $1`
			if err := st.Pool().QueryRow(context.Background(), q, typ).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
	}})
}

// Migrations are versioned in their own table and applied once; the
// tables carry the store's prefix, in the store's schema.
func TestMigrationsAreIdempotentAndPrefixed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, ws, schema := open(t, store.Config{TablePrefix: "app_"})
	if applied, err := ws.Migrate(ctx); err != nil || len(applied) != 0 {
		t.Errorf("second Migrate applied %v, %v", applied, err)
	}
	var n int
	err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
		WHERE s.nspname = $1 AND c.relname IN ('app_wf_runs', 'app_wf_tasks', 'app_wf_attempts', 'app_wf_migrations',
		'app_wf_runs_abandoned_idx')`, schema).Scan(&n)
	if err != nil || n != 5 {
		t.Errorf("prefixed schema objects: %d, %v", n, err)
	}
	if _, err := wfpostgres.New(ctx, st, wfpostgres.WithSchema("Bad-Schema")); err == nil {
		t.Error("a bad schema name was accepted")
	}
}

// The query that finds abandoned runs reads its partial index only, among
// many ended runs.
func TestAbandonedUsesItsIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _, schema := open(t, store.Config{})
	pool := st.Pool()
	table := schema + ".backstop_wf_runs"
	if _, err := pool.Exec(ctx, `INSERT INTO `+table+` (id, dag_id, dag_hash, state, created_at)
		SELECT 'r' || i, 'd', 'h', CASE WHEN i % 100 = 0 THEN 'running' ELSE 'success' END, now()
		FROM generate_series(1, 20000) AS i`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE `+table); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `EXPLAIN (FORMAT TEXT) SELECT id FROM `+table+`
		WHERE state = 'running' AND lease_expiry < now() ORDER BY lease_expiry, id LIMIT 100`)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	plan := strings.Join(lines, "\n")
	if !strings.Contains(plan, "backstop_wf_runs_abandoned_idx") {
		t.Errorf("plan does not use the partial index:\n%s", plan)
	}
}
