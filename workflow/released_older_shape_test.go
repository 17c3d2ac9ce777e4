package workflow_test

import (
	"context"
	"testing"
	"time"

	"github.com/backstophq/backstop/retry"
	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/models"
)

// A run of an older DAG shape is ended by an instance with the new shape
// only "once nobody has driven it for Config.OlderShapeGrace". An
// instance of the old shape drove it until a moment ago, waiting for a
// retry due in 20 minutes, and then stopped (the first step of a rolling
// deploy): its shutdown released the run. The release wrote lease_expiry
// 0 (-infinity on PostgreSQL), which read as "nobody has held it for
// ever", and the task's last end was 11 minutes earlier: the first pass
// of Work on an instance of the new shape ended the run failed at once,
// instead of leaving it to the old-shape instances still running.
func TestReleasedRunOfAnOlderShapeKeepsItsGrace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, ws := openSQLite(t, ":memory:")
	old := newHarnessOn(t, st, ws, workflow.Config{InstanceID: "old"})
	flaky := old.task("flaky", func(context.Context, *workflow.TaskContext) error { return errBoom })
	flaky.Retries, flaky.Strategy = 3, retry.NewFixedDelay(20*time.Minute, false)
	old.register("etl", nil, flaky)

	events := old.subscribe()
	runCtx, shutdown := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = old.engine.Run(runCtx, "etl", workflow.RunOptions{ID: "r"})
	}()
	old.waitFor(events, done, upForRetry("flaky"))
	// The old instance drives the run, waiting for the retry, for 11
	// minutes, renewing its lease (a renewal every 10 s).
	for range 66 {
		old.clock.Advance(10 * time.Second)
	}
	shutdown() // the old instance stops: the run is released
	<-done
	if r, err := old.engine.Get(ctx, "r"); err != nil || r.State != models.RunStateRunning {
		t.Fatalf("after the old instance stopped the run is %v (%v), want running", r, err)
	}

	// An instance of the new shape (a task added) starts its Work.
	h := newHarnessOn(t, st, ws, workflow.Config{InstanceID: "new", Clock: old.clock})
	h.register("etl", nil, h.task("flaky", nil), h.task("report", nil, "flaky"))
	workCtx, stop := context.WithCancel(ctx)
	workDone := make(chan struct{})
	go func() {
		defer close(workDone)
		_ = h.engine.Work(workCtx)
	}()
	// Its first pass has ended once it waits for the next one.
	h.clock.WaitForTimers(1, workDone)
	r, err := h.engine.Get(ctx, "r")
	stop()
	<-workDone
	if err != nil {
		t.Fatal(err)
	}
	if r.State != models.RunStateRunning {
		t.Fatalf("a run its old-shape instance released a moment ago was ended by the new shape's first pass: %s (%q); want running until nobody has driven it for OlderShapeGrace",
			r.State, r.Reason)
	}
}
