package workflow_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/models"
)

// The connection recording a task's success dies (a failover,
// pg_terminate_backend) after the task's own work is done. That is not
// the task's failure: as when the instance crashes there, the attempt is
// lost and runs again, and the run succeeds. The failed write was taken
// for the task's failure: with no retries, the task that succeeded was
// failed for good and dead-lettered, and its dependents upstream_failed.
func TestLostConnectionWhileRecordingSuccessRunsTheTaskAgainPostgres(t *testing.T) {
	t.Parallel()
	spec := "postgres:" + testenv.NewSchema(t, "wf_lost_")
	ws, _ := openCrashStore(t, spec)
	e, err := workflow.NewEngine(ws, workflow.Config{InstanceID: "A", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	admin := testenv.PostgresAdmin(t)
	var commits atomic.Int32
	pay := func(ctx context.Context, tc *workflow.TaskContext) error {
		tc.OnCommit(func(ctx context.Context, tx any) error {
			if commits.Add(1) > 1 {
				return nil
			}
			var pid int
			if err := tx.(pgx.Tx).QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
				return err
			}
			// Returns once the backend has gone.
			var gone bool
			if err := admin.QueryRow(context.Background(), "SELECT pg_terminate_backend($1, 30000)", pid).Scan(&gone); err != nil || !gone {
				t.Errorf("terminating the recording's connection: %v, %v", gone, err)
			}
			return nil
		})
		return nil
	}
	ship := func(context.Context, *workflow.TaskContext) error { return nil }
	d, err := workflow.NewDAG("pay", nil, workflow.Task{ID: "pay", Run: pay}, workflow.Task{ID: "ship", Upstream: []string{"pay"}, Run: ship})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(d); err != nil {
		t.Fatal(err)
	}
	r, err := e.Run(context.Background(), "pay", workflow.RunOptions{ID: "r-pay"})
	if err != nil || r.State != models.RunStateSuccess {
		t.Fatalf("Run = %v\n%s", err, r.Explain())
	}
	hist := r.Task("pay").History
	if len(hist) != 2 || hist[0].Outcome != "lost" || hist[1].Outcome != "success" || commits.Load() != 2 {
		t.Errorf("pay's attempts: %+v (%d commits); want the first lost, the second a success", hist, commits.Load())
	}
	if n, err := ws.DLQ().Count(context.Background()); err != nil || n != 0 {
		t.Errorf("dead letters: %d, %v; want none", n, err)
	}
}
