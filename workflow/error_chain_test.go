package workflow_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/models"
)

// wrapErr is a wrapper whose Error method copes with a nil cause but whose
// Unwrap reads through a nil pointer: errors.Is, errors.As and the
// fingerprint's walk to the root cause panic on it, Error does not.
type wrapErr struct{ inner *struct{ err error } }

func (w *wrapErr) Error() string { return "wrapped: no cause" }
func (w *wrapErr) Unwrap() error { return w.inner.err }

// A task that fails for good with an error whose Unwrap panics is
// dead-lettered and the run ends. Dead-lettering walked the error's chain
// (Fingerprint, ReasonOf) on the driver's goroutine, unrecovered: the panic
// took the process down.
func TestTaskErrorWhoseUnwrapPanics(t *testing.T) {
	t.Parallel()
	h := newHarness(t, workflow.Config{})
	h.register("bad-unwrap", nil,
		h.task("a", func(context.Context, *workflow.TaskContext) error { return &wrapErr{} }),
		h.task("b", nil, "a"))
	r, err := h.run("bad-unwrap", workflow.RunOptions{ID: "r-bad-unwrap"})
	if !errors.Is(err, workflow.ErrRunFailed) {
		t.Fatalf("Run = %v, want the run failed", err)
	}
	wantStates(t, r, map[string]models.TaskState{"a": models.TaskStateFailed, "b": models.TaskStateUpstreamFailed})
	if r.Task("a").DeadLetterID == "" {
		t.Errorf("a was not dead-lettered:\n%s", r.Explain())
	}
	if got := r.Task("a").Error; !strings.Contains(got, "Unwrap method") {
		t.Errorf("a's error = %q, want it to say the error's Unwrap method panicked", got)
	}
}

// loopErr is an error whose Unwrap returns itself: its chain never ends.
type loopErr struct{}

func (e *loopErr) Error() string { return "loops" }
func (e *loopErr) Unwrap() error { return e }

// A task that fails with an error whose Unwrap chain never ends fails its
// attempt, and the run ends. The driver's goroutine classified the error
// (errors.Is, errors.As walk the chain without a bound) and spun there for
// ever, the run's lease still renewed, so that no instance could take it
// over and the engine's shutdown waited for it for ever.
func TestTaskErrorWhoseUnwrapNeverEnds(t *testing.T) {
	t.Parallel()
	h := newHarness(t, workflow.Config{})
	h.register("loop-unwrap", nil,
		h.task("a", func(context.Context, *workflow.TaskContext) error { return &loopErr{} }),
		h.task("b", nil, "a"))
	done := make(chan struct{})
	var r *workflow.Run
	var err error
	go func() {
		defer close(done)
		r, err = h.engine.Run(h.ctx, "loop-unwrap", workflow.RunOptions{ID: "r-loop-unwrap"})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the run did not end in 10 s: the driver spins on the error's chain")
	}
	if !errors.Is(err, workflow.ErrRunFailed) {
		t.Fatalf("Run = %v, want the run failed", err)
	}
	wantStates(t, r, map[string]models.TaskState{"a": models.TaskStateFailed, "b": models.TaskStateUpstreamFailed})
	if r.Task("a").DeadLetterID == "" {
		t.Errorf("a was not dead-lettered:\n%s", r.Explain())
	}
	if got := r.Task("a").Error; !strings.Contains(got, "does not end") {
		t.Errorf("a's error = %q, want it to say the error's chain does not end", got)
	}
}

// The same holds for an OnCommit function's error, which fails the
// attempt and is dead-lettered on the driver's goroutine.
func TestOnCommitErrorWhoseUnwrapPanics(t *testing.T) {
	t.Parallel()
	h := newHarness(t, workflow.Config{})
	h.register("bad-unwrap-commit", nil,
		h.task("a", func(_ context.Context, tc *workflow.TaskContext) error {
			tc.OnCommit(func(context.Context, any) error { return &wrapErr{} })
			return nil
		}),
		h.task("b", nil, "a"))
	r, err := h.run("bad-unwrap-commit", workflow.RunOptions{ID: "r-bad-unwrap-commit"})
	if !errors.Is(err, workflow.ErrRunFailed) {
		t.Fatalf("Run = %v, want the run failed", err)
	}
	wantStates(t, r, map[string]models.TaskState{"a": models.TaskStateFailed, "b": models.TaskStateUpstreamFailed})
	if r.Task("a").DeadLetterID == "" {
		t.Errorf("a was not dead-lettered:\n%s", r.Explain())
	}
}
