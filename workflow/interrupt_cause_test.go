package workflow_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/models"
)

// A run whose context is cancelled with a cause holding a NUL and invalid
// UTF-8 (the caller's text): the interruption was recorded with the cause
// as it was, which PostgreSQL refuses. The task's error and reason are now
// cleaned as every error text is.
func TestInterruptionCauseIsCleaned(t *testing.T) {
	h := newHarness(t, workflow.Config{})
	started := make(chan struct{})
	h.register("d", nil, h.task("x", func(ctx context.Context, _ *workflow.TaskContext) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	}))
	ctx, cancel := context.WithCancelCause(h.ctx)
	done := make(chan error, 1)
	go func() {
		_, err := h.engine.Run(ctx, "d", workflow.RunOptions{ID: "r"})
		done <- err
	}()
	<-started
	cancel(errors.New("deploy\x00 stop \xff"))
	<-done
	run, err := h.engine.Get(h.ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	x := run.Tasks[0]
	if x.State != models.TaskStateUpForRetry || len(x.History) != 1 || !strings.Contains(x.History[0].Error, "interrupted: deploy") {
		t.Fatalf("task after the interruption: %+v", x)
	}
	for _, s := range []string{x.History[0].Error, x.Reason} {
		if strings.ContainsRune(s, 0) || !utf8Valid(s) {
			t.Errorf("stored text %q holds a NUL or invalid UTF-8", s)
		}
	}
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }
