package workflow_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/postgres"
	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfpostgres"
)

// The database goes away for a moment (a restart, a failover: here every
// connection of the store is terminated, again and again, for 1.2 s) while
// a task runs and the run's lease falls due for renewal. The lease has two
// thirds of its time left, so nobody else can take the run: the renewal is
// tried again until the database answers, and the task goes on. The first
// failed renewal stopped the driver: the running attempt was cancelled
// (lost), the run released, and Run returned the renewal's error.
func TestBriefDatabaseOutageKeepsTheRunPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := testenv.NewSchema(t, "wf_outage_")
	app := "backstop_" + schema // the store's connections, and only they
	url := testenv.PostgresURL()
	if strings.Contains(url, "?") {
		url += "&application_name=" + app
	} else {
		url += "?application_name=" + app
	}
	st, err := postgres.Open(ctx, url, store.Config{}, postgres.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	ws, err := wfpostgres.New(ctx, st, wfpostgres.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	// Renewals every second; the lease lapses 3 s after one.
	e, err := workflow.NewEngine(ws, workflow.Config{InstanceID: "A", LeaseDuration: 3 * time.Second, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	admin := testenv.PostgresAdmin(t)
	killed := 0
	outage := func(ctx context.Context, _ *workflow.TaskContext) error {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for end := time.Now().Add(1200 * time.Millisecond); time.Now().Before(end); <-tick.C {
			var n int
			if err := admin.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid, 30000))
				FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()`, app).Scan(&n); err != nil {
				return err
			}
			killed += n
		}
		select { // the work goes on after the outage, past the renewal
		case <-time.After(time.Second):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	d, err := workflow.NewDAG("outage", nil, workflow.Task{ID: "a", Run: outage},
		workflow.Task{ID: "b", Upstream: []string{"a"}, Run: func(context.Context, *workflow.TaskContext) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(d); err != nil {
		t.Fatal(err)
	}
	r, err := e.Run(ctx, "outage", workflow.RunOptions{ID: "r-outage"})
	if err != nil || r.State != models.RunStateSuccess {
		t.Fatalf("Run = %v after %d connections terminated", err, killed)
	}
	if killed == 0 {
		t.Fatal("no connection of the store was terminated")
	}
	if h := r.Task("a").History; len(h) != 1 || h[0].Outcome != "success" {
		t.Errorf("a's attempts: %+v; want one, a success", h)
	}
}
