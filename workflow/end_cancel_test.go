package workflow_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfstore"
)

// endHook calls after once a run has been ended in the store.
type endHook struct {
	wfstore.Store
	after func()
}

func (s *endHook) EndRun(ctx context.Context, runID string, l wfstore.Lease, state models.RunState, reason string) (bool, error) {
	ended, err := s.Store.EndRun(ctx, runID, l, state, reason)
	if ended && err == nil {
		s.after()
	}
	return ended, err
}

// The caller's context ends (a shutdown) just as the run ends: the run is
// ended failed in the store, and then the driver read it again with the
// ended context, failed, and returned that error before calling
// OnDAGFailure. The failure's alert was lost for good (the run has
// ended: nobody drives it again), and Run said the run was interrupted
// though it had ended. OnDAGFailure is "called once when a run ends
// failed"; Run returns the ended run and its *RunError.
func TestRunThatEndsAsItsContextEndsStillCallsOnDAGFailure(t *testing.T) {
	t.Parallel()
	st, ws := openSQLite(t, ":memory:")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := newHarnessOn(t, st, &endHook{Store: ws, after: cancel}, workflow.Config{})
	var alerts atomic.Int32
	h.register("alerting", &errorhandling.PropagationConfig{OnDAGFailure: func(context.Context, *models.DAGRun, error) error {
		alerts.Add(1)
		return nil
	}}, h.task("bad", fail(errorhandling.Permanent(errBoom))))
	r, err := h.engine.Run(ctx, "alerting", workflow.RunOptions{ID: "r"})
	if got, gerr := h.engine.Get(context.Background(), "r"); gerr != nil || got.State != models.RunStateFailed {
		t.Fatalf("the run is %v (%v), want failed", got, gerr)
	}
	if n := alerts.Load(); n != 1 {
		t.Errorf("OnDAGFailure was called %d times for the run that ended failed, want once", n)
	}
	if r == nil || r.State != models.RunStateFailed || !errors.Is(err, workflow.ErrRunFailed) {
		t.Errorf("Run = %v, %v; want the ended run and its *RunError", r, err)
	}
}
