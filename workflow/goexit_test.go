package workflow_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/models"
)

// A task function that ends its goroutine with runtime.Goexit (a helper
// calling t.FailNow or t.SkipNow in a test, a library that exits its
// goroutine) neither returns nor panics: the engine never got the
// attempt's result nor its token back. The run stayed running for ever,
// its lease renewed, without a word, and each such attempt kept one of
// MaxConcurrentTasks for good. The attempt now fails, saying why.
func TestTaskThatCallsGoexitFailsItsAttempt(t *testing.T) {
	t.Parallel()
	h := newHarness(t, workflow.Config{MaxConcurrentTasks: 1})
	h.register("exits", nil, h.task("exit", func(context.Context, *workflow.TaskContext) error {
		runtime.Goexit()
		return nil
	}), h.task("after", nil, "exit"), h.task("other", nil))
	done, out := h.runAsync("exits", workflow.RunOptions{ID: "r"})
	select {
	case <-done:
	case <-time.After(time.Minute): // a bound for the failure, not a wait: the run ends at once
		t.Fatal("the run did not end within a minute of its task calling runtime.Goexit")
	}
	r, err := out()
	if !errors.Is(err, workflow.ErrRunFailed) {
		t.Fatalf("run: %v", err)
	}
	wantStates(t, r, map[string]models.TaskState{"exit": models.TaskStateFailed,
		"after": models.TaskStateUpstreamFailed, "other": models.TaskStateSuccess})
	if e := r.Task("exit").Error; !strings.Contains(e, "runtime.Goexit") {
		t.Errorf("exit's error %q does not say it called runtime.Goexit", e)
	}
}
