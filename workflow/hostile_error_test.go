package workflow_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	eh "github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/models"
)

// nilPtrError is an error type whose Error method reads its receiver: a
// nil *nilPtrError returned as an error (Go's typed-nil pitfall) is
// non-nil, and its Error method panics.
type nilPtrError struct{ msg string }

func (e *nilPtrError) Error() string { return e.msg }

func typedNil() error {
	var e *nilPtrError
	return e
}

// A task that returns an error whose Error method panics (a typed nil
// pointer) fails its attempt like a task that panics; the engine records
// it and goes on. The driver read the message on its own goroutine, where
// the panic took the process down, and again on every resume of the run.
func TestTaskErrorWhoseErrorMethodPanics(t *testing.T) {
	t.Parallel()
	h := newHarness(t, workflow.Config{})
	h.register("typed-nil", &eh.PropagationConfig{Policy: eh.PropagationPolicySkipDownstream},
		h.task("a", func(context.Context, *workflow.TaskContext) error { return typedNil() }),
		h.task("b", nil, "a"),
		h.task("c", nil),
	)
	r, err := h.run("typed-nil", workflow.RunOptions{ID: "r-typed-nil"})
	var re *workflow.RunError
	if !errors.As(err, &re) {
		t.Fatalf("Run error = %v, want a *RunError", err)
	}
	wantStates(t, r, map[string]models.TaskState{
		"a": models.TaskStateFailed, "b": models.TaskStateUpstreamFailed, "c": models.TaskStateSuccess,
	})
	if got := r.Task("a").Error; !strings.Contains(got, "panicked") {
		t.Errorf("a's error = %q, want it to say the error's Error method panicked", got)
	}
	if r.Task("a").DeadLetterID == "" {
		t.Errorf("a was not dead-lettered:\n%s", r.Explain())
	}
}

// OnTaskFailure and OnDAGFailure that panic (an alert with a nil client)
// are logged at ERROR and taken as failed: the task is dead-lettered and
// the run ends. The panic took the process down, and OnTaskFailure's did
// again on every resume of the run, whose failure was then dead-lettered
// again: the run could never end.
func TestPanickingFailureCallbacks(t *testing.T) {
	t.Parallel()
	h := newHarness(t, workflow.Config{})
	var alerts map[string]int // nil: a write panics
	h.register("alerts", &eh.PropagationConfig{
		OnTaskFailure: func(_ context.Context, task *models.Task, _ *models.TaskInstance, _ error) error {
			alerts[task.ID]++
			return nil
		},
		OnDAGFailure: func(_ context.Context, run *models.DAGRun, _ error) error {
			alerts[run.ID]++
			return nil
		},
	}, h.task("a", fail(eh.Permanent(errors.New("a broke")))), h.task("b", nil, "a"))
	r, err := h.run("alerts", workflow.RunOptions{ID: "r-alerts"})
	if !errors.Is(err, workflow.ErrRunFailed) {
		t.Fatalf("Run = %v, want the run failed", err)
	}
	wantStates(t, r, map[string]models.TaskState{"a": models.TaskStateFailed, "b": models.TaskStateUpstreamFailed})
	if r.Task("a").DeadLetterID == "" {
		t.Errorf("a was not dead-lettered:\n%s", r.Explain())
	}
	logs := h.logs.String()
	for _, cb := range []string{"OnTaskFailure panicked", "OnDAGFailure panicked"} {
		if !strings.Contains(logs, "level=ERROR msg=\""+cb) {
			t.Errorf("no ERROR record %q in the logs:\n%s", cb, logs)
		}
	}
}

// A classifier rule and an OnEvent that panic are logged at ERROR; the
// task's failure is taken as transient, dead-lettered when its retries are
// spent, and the run ends. Either panic took the process down, the
// classifier's again on every resume of the run.
func TestPanickingClassifierAndOnEvent(t *testing.T) {
	t.Parallel()
	c := eh.NewErrorClassifier()
	var codes map[string]bool // nil: the rule reads it and panics on a nil pointer below
	c.AddRule(eh.Rule{Name: "buggy", Match: func(err error) bool {
		var p *struct{ ok bool }
		if codes == nil {
			return p.ok
		}
		return false
	}, Class: eh.ClassPermanent})
	h := newHarness(t, workflow.Config{Classifier: c, OnEvent: func(ev workflow.Event) {
		if ev.TaskID != "" {
			codes[ev.TaskID] = true // a write to a nil map
		}
	}})
	h.register("buggy-hooks", nil, h.task("a", fail(errors.New("a broke"))), h.task("b", nil, "a"))
	r, err := h.run("buggy-hooks", workflow.RunOptions{ID: "r-buggy-hooks"})
	if !errors.Is(err, workflow.ErrRunFailed) {
		t.Fatalf("Run = %v, want the run failed", err)
	}
	wantStates(t, r, map[string]models.TaskState{"a": models.TaskStateFailed, "b": models.TaskStateUpstreamFailed})
	if r.Task("a").DeadLetterID == "" {
		t.Errorf("a was not dead-lettered:\n%s", r.Explain())
	}
	logs := h.logs.String()
	for _, msg := range []string{"the error classifier panicked; the error is taken as transient",
		"the error classifier panicked while dead-lettering", "OnEvent panicked"} {
		if !strings.Contains(logs, "level=ERROR msg=\""+msg) {
			t.Errorf("no ERROR record %q in the logs:\n%.3000s", msg, logs)
		}
	}
}

// Run.Explain escapes the control and invisible characters of what it
// prints from the store: a task's error holding a terminal escape
// sequence (a title rewrite, a screen clear, a bidirectional override)
// and a run ID with one are shown as escapes, and the lines stay one per
// task. They reached the operator's terminal as they were.
func TestExplainEscapesControlCharacters(t *testing.T) {
	t.Parallel()
	h := newHarness(t, workflow.Config{})
	hostile := "\x1b]0;pwned\x07cleared\x1b[2J\r\nnext line\u202eevil"
	h.register("hostile", nil, h.task("a", fail(eh.Permanent(errors.New(hostile)))), h.task("b", nil))
	r, _ := h.run("hostile", workflow.RunOptions{ID: "run\x1b[31m"})
	out := r.Explain()
	for _, c := range out {
		if (c < 0x20 && c != '\n') || c == 0x7f || (c >= 0x80 && c < 0xa0) || c == '\u202e' {
			t.Fatalf("Explain printed %U raw:\n%q", c, out)
		}
	}
	for _, want := range []string{`run run\x1b[31m of DAG hostile: failed`,
		`\x1b]0;pwned\x07cleared\x1b[2J\x0d\x0anext line\u202eevil`} {
		if !strings.Contains(out, want) {
			t.Errorf("Explain does not show %s:\n%s", want, out)
		}
	}
	if lines := strings.Count(out, "\n"); lines != 4 { // run, why, a, b
		t.Errorf("Explain has %d lines, want 4:\n%s", lines, out)
	}
}

// shortTable is a retry strategy with a table of delays shorter than the
// task's retries: its Delay panics past the table's end.
type shortTable []time.Duration

func (s shortTable) Delay(n int) time.Duration { return s[n-1] }

// A retry strategy whose Delay panics took the process down (the
// attempt's failure never recorded, so again on every resume of the run).
// The default back-off is used instead, the task is retried as its
// retries allow, and the panic is logged at ERROR.
func TestPanickingRetryStrategy(t *testing.T) {
	t.Parallel()
	h := newHarness(t, workflow.Config{})
	events := h.subscribe()
	a := h.task("a", func(ctx context.Context, tc *workflow.TaskContext) error {
		if tc.Attempt() < 3 {
			return errBoom
		}
		return nil
	})
	a.Retries = 2
	a.Strategy = shortTable{time.Minute}
	h.register("short-table", nil, a)
	done, out := h.runAsync("short-table", workflow.RunOptions{ID: "r-short-table"})
	ev := h.waitFor(events, done, upForRetry("a"))
	if want := t0.Add(time.Minute); !ev.NextAttemptAt.Equal(want) {
		t.Errorf("first retry at %v, want %v (the table's)", ev.NextAttemptAt, want)
	}
	h.clock.Set(ev.NextAttemptAt)
	ev = h.waitFor(events, done, upForRetry("a"))
	if d := ev.NextAttemptAt.Sub(h.clock.Now()); d < 1500*time.Millisecond || d > 2500*time.Millisecond {
		t.Errorf("second retry in %s, want the default back-off's (2 s ± 25 %%)", d)
	}
	h.clock.Set(ev.NextAttemptAt)
	r, err := out()
	if err != nil || r.State != models.RunStateSuccess || h.callsOf("a") != 3 {
		t.Fatalf("run = %s, %v after %d calls, want success after 3:\n%s", r.State, err, h.callsOf("a"), r.Explain())
	}
	if logs := h.logs.String(); !strings.Contains(logs, `level=ERROR msg="the retry strategy panicked; the default back-off is used"`) {
		t.Errorf("no ERROR record of the panic in the logs:\n%.3000s", logs)
	}
}
