package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	eh "github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/retry"
	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/models"
)

// runAsync runs the DAG in a goroutine; done closes when Run returns.
func (h *harness) runAsync(dagID string, opts workflow.RunOptions) (done chan struct{}, out func() (*workflow.Run, error)) {
	done = make(chan struct{})
	var r *workflow.Run
	var err error
	go func() {
		defer close(done)
		r, err = h.engine.Run(h.ctx, dagID, opts)
	}()
	return done, func() (*workflow.Run, error) { <-done; return r, err }
}

func upForRetry(id string) func(workflow.Event) bool {
	return func(ev workflow.Event) bool { return ev.TaskID == id && ev.TaskState == models.TaskStateUpForRetry }
}

// A flaky task is retried on its strategy's schedule, timed by the fake
// clock: up_for_retry until due (stored, with the time in its reason),
// then run again.
func TestRetriesFollowTheStrategyOnTheClock(t *testing.T) {
	t.Parallel()
	h := newHarness(t, workflow.Config{})
	events := h.subscribe()
	flaky := h.task("flaky", func(ctx context.Context, tc *workflow.TaskContext) error {
		if tc.Attempt() < 3 {
			return fmt.Errorf("attempt %d: %w", tc.Attempt(), errBoom)
		}
		return tc.SetResult("ok")
	})
	flaky.Retries = 3
	flaky.Strategy = retry.NewExponentialBackoff(10*time.Second, time.Hour, false)
	h.register("retry", nil, flaky, h.task("next", nil, "flaky"))
	done, out := h.runAsync("retry", workflow.RunOptions{ID: "r"})

	ev := h.waitFor(events, done, upForRetry("flaky"))
	if want := t0.Add(10 * time.Second); !ev.NextAttemptAt.Equal(want) {
		t.Errorf("first retry at %v, want %v", ev.NextAttemptAt, want)
	}
	mid, err := h.engine.Get(h.ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	ts := mid.Task("flaky")
	if ts.State != models.TaskStateUpForRetry ||
		ts.Reason != "up for retry: attempt 1 failed (attempt 1: boom); retry 1 of 3 at 2025-03-01T12:00:10Z" {
		t.Errorf("while waiting: %s %q", ts.State, ts.Reason)
	}
	wantReason(t, mid, "next", "pending: waiting for upstream task flaky")
	if !strings.Contains(mid.Explain(), "why: running, held by instance ") {
		t.Errorf("explanation of a running run:\n%s", mid.Explain())
	}
	if h.callsOf("flaky") != 1 {
		t.Errorf("flaky ran %d times before its retry was due", h.callsOf("flaky"))
	}
	h.clock.Set(ev.NextAttemptAt)

	ev = h.waitFor(events, done, upForRetry("flaky"))
	if want := t0.Add(30 * time.Second); !ev.NextAttemptAt.Equal(want) {
		t.Errorf("second retry at %v, want %v (10s + 20s)", ev.NextAttemptAt, want)
	}
	h.clock.Set(ev.NextAttemptAt)

	r, err := out()
	if err != nil || r.State != models.RunStateSuccess {
		t.Fatalf("run = %s, %v", r.State, err)
	}
	hist := r.Task("flaky").History
	if len(hist) != 3 || hist[0].Outcome != "failed" || hist[1].Outcome != "failed" || hist[2].Outcome != "success" ||
		!hist[1].StartedAt.Equal(t0.Add(10*time.Second)) || hist[0].Error != "attempt 1: boom" {
		t.Errorf("history = %+v", hist)
	}
	if string(r.Task("flaky").Result) != `"ok"` {
		t.Errorf("result = %s", r.Task("flaky").Result)
	}
}

// A task out of retries fails for good and is dead-lettered with its
// attempts; a permanent error is not retried at all.
func TestRetriesRunOutOrStopAtPermanentErrors(t *testing.T) {
	t.Parallel()
	h := newHarness(t, workflow.Config{})
	events := h.subscribe()
	always := h.task("always", fail(errBoom))
	always.Retries = 2
	always.Strategy = retry.NewFixedDelay(time.Minute, false)
	perm := h.task("perm", fail(eh.Permanent(errors.New("bad input"))))
	perm.Retries = 5
	h.register("out", nil, always, perm)
	done, out := h.runAsync("out", workflow.RunOptions{})
	for range 2 {
		h.clock.Set(h.waitFor(events, done, upForRetry("always")).NextAttemptAt)
	}
	r, err := out()
	if !errors.Is(err, workflow.ErrRunFailed) {
		t.Fatalf("err = %v", err)
	}
	wantReason(t, r, "always", "failed: boom (attempt 3; gave up after 3 failed attempts, 2 retries allowed)")
	wantReason(t, r, "perm", "failed: bad input (attempt 1; permanent error, not retried)")
	if h.callsOf("always") != 3 || h.callsOf("perm") != 1 {
		t.Errorf("calls: always %d, perm %d; want 3 and 1", h.callsOf("always"), h.callsOf("perm"))
	}
	e, err := h.store.DLQ().Get(h.ctx, r.Task("always").DeadLetterID)
	if err != nil || e.Attempts != 3 || e.TaskInstanceID != r.ID+"/always/3" {
		t.Errorf("dead letter = %+v, %v", e, err)
	}
}

// A strategy that says Stop ends the retries before Retries runs out.
func TestRetryStrategyStop(t *testing.T) {
	t.Parallel()
	h := newHarness(t, workflow.Config{})
	task := h.task("t", fail(errBoom))
	task.Retries = 4
	task.Strategy = retry.NewNoRetry()
	h.register("stop", nil, task)
	r, _ := h.run("stop", workflow.RunOptions{})
	wantReason(t, r, "t", "failed: boom (attempt 1; the retry strategy stopped after 1 failed attempt)")
}

// An attempt past its Timeout (on the engine's clock) is cancelled and
// fails with a *TimeoutError, which is retried like any transient error:
// also when the function ignores the cancellation and returns nil late (it
// was recorded as a success).
func TestTimeoutCancelsTheAttempt(t *testing.T) {
	t.Parallel()
	for name, late := range map[string]func(ctx context.Context) error{
		"returns the context's error": func(ctx context.Context) error { return ctx.Err() },
		"returns nil":                 func(context.Context) error { return nil },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, workflow.Config{})
			events := h.subscribe()
			started := make(chan struct{}, 1)
			slow := h.task("slow", func(ctx context.Context, tc *workflow.TaskContext) error {
				if tc.Attempt() > 1 {
					return nil
				}
				started <- struct{}{}
				<-ctx.Done()
				return late(ctx)
			})
			slow.Timeout = 5 * time.Second
			slow.Retries = 1
			slow.Strategy = retry.NewFixedDelay(time.Second, false)
			h.register("timeout", nil, slow)
			done, out := h.runAsync("timeout", workflow.RunOptions{})
			<-started // the attempt's timer is set before the function is called
			h.clock.Advance(5 * time.Second)
			ev := h.waitFor(events, done, upForRetry("slow"))
			if !strings.Contains(ev.Reason, "task slow timed out after 5s") {
				t.Errorf("reason = %q", ev.Reason)
			}
			h.clock.Set(ev.NextAttemptAt)
			if r, err := out(); err != nil || r.Task("slow").Attempts != 2 {
				t.Fatalf("run: %v, %v", r, err)
			}
		})
	}
}

// A panicking task fails its attempt; the engine goes on.
func TestPanicFailsTheAttempt(t *testing.T) {
	t.Parallel()
	h := newHarness(t, workflow.Config{})
	h.register("panic", nil, h.task("p", func(context.Context, *workflow.TaskContext) error { panic("nil map") }))
	r, err := h.run("panic", workflow.RunOptions{})
	if !errors.Is(err, workflow.ErrRunFailed) || !strings.Contains(r.Task("p").Reason, "task panicked: nil map") {
		t.Errorf("run: %v; reason %q", err, r.Task("p").Reason)
	}
}
