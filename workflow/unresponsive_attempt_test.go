package workflow_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/models"
)

// An attempt cancelled while its run goes on (past its task's Timeout, or
// under the fail policy when another task failed) whose function ignores
// its context keeps its run waiting until it returns. That wait was
// silent: the run stayed running, its lease renewed, with nothing saying
// which task held it. 5 s (on the engine's clock) after the cancellation a
// WARN names the task, the attempt and why it was cancelled; the run goes
// on once the function returns.
func TestCancelledAttemptThatDoesNotReturnIsLogged(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, why string
		prop      *errorhandling.PropagationConfig
		timeout   time.Duration
		want      models.RunState
	}{
		{name: "past its timeout", why: "attempt timed out", timeout: time.Minute, want: models.RunStateSuccess},
		{name: "the run stopped under fail", why: "task bad failed under fail",
			prop: &errorhandling.PropagationConfig{Policy: errorhandling.PropagationPolicyFail}, want: models.RunStateFailed},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			lw := &lockedWriter{w: &buf}
			logs := func() string { // read while the run writes
				lw.mu.Lock()
				defer lw.mu.Unlock()
				return buf.String()
			}
			h := newHarness(t, workflow.Config{LeaseDuration: time.Hour,
				Logger: slog.New(slog.NewTextHandler(lw, &slog.HandlerOptions{Level: slog.LevelDebug}))})
			started, release := make(chan struct{}), make(chan struct{})
			hung := h.task("hung", func(ctx context.Context, tc *workflow.TaskContext) error {
				if tc.Attempt() == 1 {
					close(started)
					<-release // ignores ctx
				}
				return nil
			})
			hung.Timeout, hung.Retries = c.timeout, 1
			tasks := []workflow.Task{hung}
			if c.prop != nil {
				tasks = append(tasks, h.task("bad", func(context.Context, *workflow.TaskContext) error {
					<-started
					return errorhandling.Permanent(errBoom)
				}))
			}
			h.register("hung", c.prop, tasks...)
			done, out := h.runAsync("hung", workflow.RunOptions{ID: "r"})
			<-started
			if c.timeout > 0 {
				h.clock.Advance(c.timeout)
			}
			// finish lets the function return and runs the clock until the
			// run ends.
			finish := func() (*workflow.Run, error) {
				close(release)
				go func() {
					for {
						if _, ok := h.clock.AdvanceToNext(done); !ok {
							return
						}
					}
				}()
				return out()
			}
			deadline := time.Now().Add(10 * time.Second)
			for !strings.Contains(logs(), "did not return after its context was cancelled") {
				if time.Now().After(deadline) {
					_, _ = finish()
					t.Fatalf("no warning of the attempt that does not return:\n%s", logs())
				}
				// The grace period's timer is set once the cancellation
				// is seen: advance until it fires.
				h.clock.WaitForTimers(1, done)
				h.clock.Advance(time.Second)
			}
			text := logs()
			for _, want := range []string{"level=WARN", "task_id=hung", "attempt=1", c.why} {
				if !strings.Contains(text, want) {
					t.Errorf("the warning lacks %q:\n%s", want, text)
				}
			}
			if r, _ := finish(); r == nil || r.State != c.want {
				t.Fatalf("run = %v, want %s\n%s", r, c.want, logs())
			}
		})
	}
}
