package workflow_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/models"
)

// An OnCommit function that calls runtime.Goexit (t.FailNow in a test
// helper) fails its attempt, as one that panics does. It ran on the
// driver's goroutine and ended it: Run never returned (here, the test's
// goroutine ended with it), the run stayed running, and on SQLite the
// success's write transaction stayed open, holding every other write.
// Once the attempt failed, the store takes writes again: a second run
// runs to its end.
func TestOnCommitThatCallsGoexitFailsTheAttempt(t *testing.T) {
	t.Parallel()
	h := newHarness(t, workflow.Config{})
	h.register("goexit-commit", nil, h.task("t", func(ctx context.Context, tc *workflow.TaskContext) error {
		tc.OnCommit(func(context.Context, any) error {
			runtime.Goexit()
			return nil
		})
		return nil
	}), h.task("after", nil, "t"))
	h.register("plain", nil, h.task("p", nil))
	done := make(chan struct{})
	var (
		r   *workflow.Run
		err error
	)
	go func() {
		defer close(done)
		r, err = h.engine.Run(h.ctx, "goexit-commit", workflow.RunOptions{ID: "r"})
	}()
	<-done
	if r == nil || !errors.Is(err, workflow.ErrRunFailed) {
		t.Fatalf("Run = %v, %v; want the run failed", r, err)
	}
	wantStates(t, r, map[string]models.TaskState{"t": models.TaskStateFailed, "after": models.TaskStateUpstreamFailed})
	if e := r.Task("t").Error; !strings.Contains(e, "Goexit") {
		t.Errorf("t's error = %q, want it to name runtime.Goexit", e)
	}
	if p, err := h.engine.Run(h.ctx, "plain", workflow.RunOptions{ID: "p"}); err != nil || p.State != models.RunStateSuccess {
		t.Errorf("a second run after it = %v, %v; want it to succeed", p, err)
	}
}
