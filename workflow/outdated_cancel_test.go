package workflow_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfstore"
)

// Work's context ends (a shutdown) just as it ends a run of an older
// shape: the run is ended failed, and OnDAGFailure is still called. It
// read the run again with the ended context, failed, and the alert was
// lost for good: nobody drives an ended run again.
func TestOutdatedRunEndedAsWorkStopsStillCallsOnDAGFailure(t *testing.T) {
	t.Parallel()
	ws, _ := openCrashStore(t, "sqlite::memory:")
	old := newHarnessOn(t, nil, ws, workflow.Config{})
	old.register("etl", nil, old.task("extract", nil), old.task("load", nil, "extract"))
	ctx := context.Background()
	if _, err := old.engine.Start(ctx, "etl", workflow.RunOptions{ID: "r-old"}); err != nil {
		t.Fatal(err)
	}
	if err := old.store.AcquireRun(ctx, "r-old", wfstore.Lease{Owner: "gone", Now: t0, TTL: 30 * time.Second}); err != nil {
		t.Fatal(err)
	}

	workCtx, stop := context.WithCancel(ctx)
	defer stop()
	h := newHarnessOn(t, nil, &endHook{Store: ws, after: stop},
		workflow.Config{InstanceID: "new", Clock: old.clock, LeaseDuration: 30 * time.Second})
	var alerts atomic.Int32
	h.register("etl", &errorhandling.PropagationConfig{OnDAGFailure: func(context.Context, *models.DAGRun, error) error {
		alerts.Add(1)
		return nil
	}}, h.task("extract", nil), h.task("store", nil, "extract"))
	workDone := make(chan struct{})
	go func() {
		defer close(workDone)
		_ = h.engine.Work(workCtx)
	}()
	// Work looks every 15 s; the run is ended once nobody held it for
	// ten minutes, and Work's context ends with it.
advance:
	for elapsed := time.Duration(0); elapsed < 12*time.Minute; elapsed += 15 * time.Second {
		select {
		case <-workDone:
			break advance
		default:
		}
		h.clock.WaitForTimers(1, workDone)
		h.clock.Advance(15 * time.Second)
	}
	<-workDone
	if r, err := h.engine.Get(ctx, "r-old"); err != nil || r.State != models.RunStateFailed {
		t.Fatalf("the run of the old shape is %v (%v), want failed", r, err)
	}
	if n := alerts.Load(); n != 1 {
		t.Errorf("OnDAGFailure was called %d times for the run ended failed as Work stopped, want once", n)
	}
}
