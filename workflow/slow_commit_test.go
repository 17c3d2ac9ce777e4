package workflow_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/models"
)

// An OnCommit function that outlasts the engine's bound on recording an
// attempt's outcome (30 s: here one that waits for its context to end)
// cut the success's transaction short. That was not taken for the
// attempt's failure: the driver stopped, Run returned "context deadline
// exceeded", and the run was released with the task still running, so
// that every resume (Engine.Work) found the attempt lost, ran the task
// again, and timed its OnCommit out again, for ever, no failure ever
// counted. "An error from fn fails the attempt": the attempt now fails,
// retried as its task's retries allow (none here). The test takes the
// 30 s of the bound.
func TestOnCommitThatOutlastsTheWriteBoundFailsTheAttempt(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the engine's 30 s bound on a write")
	}
	t.Parallel()
	h := newHarness(t, workflow.Config{})
	h.register("slow-commit", nil, h.task("t", func(ctx context.Context, tc *workflow.TaskContext) error {
		tc.OnCommit(func(ctx context.Context, _ any) error {
			<-ctx.Done()
			return ctx.Err()
		})
		return nil
	}), h.task("after", nil, "t"))
	r, err := h.engine.Run(h.ctx, "slow-commit", workflow.RunOptions{ID: "r"})
	if r == nil || !errors.Is(err, workflow.ErrRunFailed) {
		t.Fatalf("Run = %v, %v; want the run failed", r, err)
	}
	wantStates(t, r, map[string]models.TaskState{"t": models.TaskStateFailed, "after": models.TaskStateUpstreamFailed})
	if e := r.Task("t").Error; !strings.Contains(e, "recording the success") {
		t.Errorf("t's error = %q, want it to say recording the success failed", e)
	}
	if n := h.callsOf("t"); n != 1 {
		t.Errorf("t ran %d times, want once", n)
	}
}
