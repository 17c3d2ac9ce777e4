package wfpostgres_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/postgres"
	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/wfpostgres"
	"github.com/backstophq/backstop/workflow/wfstore"
	"github.com/backstophq/backstop/workflow/wfstore/wfstoretest"
)

// open returns a migrated PostgreSQL store and its workflow store in a new
// schema of the test server (skipped when it is unreachable, failed under
// CI=true).
func open(t testing.TB, cfg store.Config) (*postgres.Store, *wfpostgres.Store, string) {
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
		// The suite gives each lease its time (Lease.Now), which the store
		// takes only when it runs on a clock of its own.
		st, ws, schema := open(t, store.Config{Clock: clock.Real})
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

// TestLeasesAreJudgedOnTheDatabaseClock: with the default configuration
// (no store clock) an instance's own clock does not decide whether a
// lease lapsed. Before, an instance whose clock ran two minutes ahead of
// the one driving a run found its lease lapsed, took the run over and ran
// the task in progress a second time, at once (the engine-level case
// below reproduced it on PostgreSQL). Now the lease runs on the
// database's clock, whatever the instances' clocks say.
func TestLeasesAreJudgedOnTheDatabaseClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, ws, _ := open(t, store.Config{})
	wall := time.Now()
	behind := wfstore.Lease{Owner: "behind", Now: wall.Add(-2 * time.Minute), TTL: 30 * time.Second}
	ahead := wfstore.Lease{Owner: "ahead", Now: wall.Add(2 * time.Minute), TTL: 30 * time.Second}
	if err := ws.CreateRun(ctx, &wfstore.Run{ID: "r", DAGID: "d"}, []string{"a"}, behind); err != nil {
		t.Fatal(err)
	}
	if err := ws.AcquireRun(ctx, "r", ahead); !errors.Is(err, wfstore.ErrLeased) {
		t.Fatalf("an instance with its clock ahead took a live run: %v, want ErrLeased", err)
	}
	if ids, err := ws.Abandoned(ctx, wfstore.Lease{Now: ahead.Now.Add(time.Hour), TTL: ahead.TTL}, 10, nil); err != nil || len(ids) != 0 {
		t.Fatalf("Abandoned with a clock ahead = %v, %v; want none", ids, err)
	}
	// The holder, its clock behind, still holds it: renewing and starting
	// a task are not refused as if its lease had lapsed.
	if err := ws.RenewRun(ctx, "r", behind); err != nil {
		t.Fatalf("renew with a clock behind: %v", err)
	}
	if err := ws.StartAttempt(ctx, "r", "a", 1, behind); err != nil {
		t.Fatalf("start an attempt with a clock behind: %v", err)
	}
	snap, err := ws.Load(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	if d := snap.Run.LeaseExpiry.Sub(wall); d < 20*time.Second || d > 40*time.Second {
		t.Errorf("lease expires %v after the wall clock, want about the 30 s TTL from the database's now", d)
	}

	// The engines: the one driving the run is two minutes behind the one
	// that would take it over.
	ok := func(context.Context, *workflow.TaskContext) error { return nil }
	d, err := workflow.NewDAG("slow", nil, workflow.Task{ID: "x", Run: ok})
	if err != nil {
		t.Fatal(err)
	}
	engine := func(name string, at time.Time) *workflow.Engine {
		e, err := workflow.NewEngine(ws, workflow.Config{InstanceID: name, Clock: clock.NewFake(at),
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Register(d); err != nil {
			t.Fatal(err)
		}
		return e
	}
	slow, fast := engine("slow", wall.Add(-2*time.Minute)), engine("fast", wall.Add(2*time.Minute))
	if _, err := slow.Start(ctx, "slow", workflow.RunOptions{ID: "held"}); err != nil {
		t.Fatal(err)
	}
	// Start leaves the run to Work: take it as the slow engine would.
	if err := ws.AcquireRun(ctx, "held", wfstore.Lease{Owner: "slow", Now: wall.Add(-2 * time.Minute), TTL: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if _, err := fast.Resume(ctx, "held"); !errors.Is(err, wfstore.ErrLeased) {
		t.Fatalf("the engine with its clock ahead resumed a held run: %v, want ErrLeased", err)
	}
}

// The workflow tables churn as the outbox does (a run's lease renewals,
// its tasks' changes, its attempts), and on a server whose autovacuum is
// off or behind nothing vacuumed them: the fleet's leader's vacuum looked
// after the outbox's tables only. Past the threshold they are vacuumed.
func TestLeadersVacuumTakesTheWorkflowTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _, schema := open(t, store.Config{})
	conn, err := st.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	runs := schema + ".backstop_wf_runs"
	for _, q := range []string{
		`INSERT INTO ` + runs + ` (id, dag_id, dag_hash, state, created_at)
			SELECT 'r' || g, 'd', 'h', 'success', now() FROM generate_series(1, 30000) g`,
		`DELETE FROM ` + runs,
		`SELECT pg_stat_force_next_flush()`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	got, err := st.Vacuum(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(got, `"`+schema+`".backstop_wf_runs`) {
		t.Fatalf("Vacuum = %v, want the workflow runs among them", got)
	}
}
