package workflow_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/models"
)

// exitingClassifier is a classifier whose one rule ends its caller's
// goroutine.
func exitingClassifier() *errorhandling.ErrorClassifier {
	c := errorhandling.NewErrorClassifier()
	c.AddRule(errorhandling.Rule{Name: "exit", Match: func(error) bool { runtime.Goexit(); return false }})
	return c
}

// exitingStrategy is a retry strategy that ends its caller's goroutine.
type exitingStrategy struct{}

func (exitingStrategy) Delay(int) time.Duration {
	runtime.Goexit()
	return 0
}

// User code the driver calls on its own goroutine (OnTaskFailure,
// OnDAGFailure, OnEvent, a task's retry strategy, the error classifier,
// the dead-letter manager's OnEntryAdded and OnThresholdReached) that calls
// runtime.Goexit (t.FailNow in a test's callback, a library exiting its
// goroutine) ended the driver's goroutine, which is Run's caller's: Run
// never returned, and its run was left running with a lapsing lease. Once
// another instance took it over, the same code ended that driver too, a
// lease later, for ever: the run never ended. Each is now taken as a
// callback that failed (logged at ERROR), as a panic is, and the run ends.
func TestUserCodeThatCallsGoexitDoesNotEndTheDriver(t *testing.T) {
	t.Parallel()
	exit := func(context.Context, *models.DAGRun, error) error { runtime.Goexit(); return nil }
	cases := []struct {
		name     string
		cfg      workflow.Config
		prop     *errorhandling.PropagationConfig
		strategy bool
		setup    func(*workflow.Engine)
		// threshold gives the engine a dead-letter manager whose
		// threshold is one entry.
		threshold bool
	}{
		{name: "OnTaskFailure", prop: &errorhandling.PropagationConfig{
			OnTaskFailure: func(context.Context, *models.Task, *models.TaskInstance, error) error {
				runtime.Goexit()
				return nil
			}}},
		{name: "OnDAGFailure", prop: &errorhandling.PropagationConfig{OnDAGFailure: exit}},
		{name: "OnEvent", cfg: workflow.Config{OnEvent: func(ev workflow.Event) {
			if ev.TaskState == models.TaskStateFailed {
				runtime.Goexit()
			}
		}}},
		{name: "Strategy", strategy: true},
		{name: "OnEntryAdded", setup: func(e *workflow.Engine) {
			e.DeadLetters().OnEntryAdded(func(*dlq.Entry) { runtime.Goexit() })
		}},
		{name: "OnThresholdReached", threshold: true, setup: func(e *workflow.Engine) {
			e.DeadLetters().OnThresholdReached(func(int) { runtime.Goexit() })
		}},
		{name: "Classifier", cfg: workflow.Config{Classifier: exitingClassifier()}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			st, ws := openSQLite(t, ":memory:")
			cfg := c.cfg
			if c.threshold {
				cfg.DLQManager = dlq.NewManager(ws.DLQ(), 1)
			}
			h := newHarnessOn(t, st, ws, cfg)
			if c.setup != nil {
				c.setup(h.engine)
			}
			task := h.task("t", fail(errBoom))
			if c.strategy {
				task.Retries, task.Strategy = 1, exitingStrategy{}
			}
			h.register("d", c.prop, task, h.task("other", nil))
			done, out := h.runAsync("d", workflow.RunOptions{ID: "r"})
			if c.strategy {
				// The retry waits for the default back-off's delay on
				// the fake clock: move it from deadline to deadline.
				go func() {
					for {
						if _, ok := h.clock.AdvanceToNext(done); !ok {
							return
						}
					}
				}()
			}
			select {
			case <-done:
			case <-time.After(time.Minute): // a bound for the failure, not a wait: the run ends at once
				t.Fatalf("Run did not return within a minute of %s calling runtime.Goexit", c.name)
			}
			r, err := out()
			if r == nil {
				t.Fatalf("Run returned no run (its goroutine was ended): %v\nlogs:\n%s", err, h.logs.String())
			}
			if !errors.Is(err, workflow.ErrRunFailed) {
				t.Fatalf("run: %v", err)
			}
			if r.State != models.RunStateFailed {
				t.Fatalf("run is %s, want failed", r.State)
			}
			if c.strategy {
				// The default back-off replaces the strategy: the task
				// is retried as it allows, then fails.
				if n := h.callsOf("t"); n != 2 {
					t.Errorf("t ran %d times, want 2 (its one retry)", n)
				}
			}
			if r.Task("t").DeadLetterID == "" {
				t.Errorf("t was not dead-lettered (reason %q)", r.Task("t").Reason)
			}
			if logs := h.logs.String(); !c.threshold && !strings.Contains(logs, "called runtime.Goexit") {
				// (The threshold's manager logs to slog.Default.)
				t.Errorf("nothing logged says %s called runtime.Goexit:\n%s", c.name, logs)
			}
			got, err := h.engine.Get(h.ctx, "r")
			if err != nil || got.State != models.RunStateFailed {
				t.Fatalf("stored run: %v, %v", got, err)
			}
		})
	}
}
