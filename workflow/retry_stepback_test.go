package workflow_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/retry"
	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/models"
)

// steppedClock is a fake clock whose reading can be stepped back, as an
// operator or NTP steps a wall clock; its timers run on elapsed time, as
// Go's timers do.
type steppedClock struct {
	*clock.Fake
	offset atomic.Int64
}

func (c *steppedClock) Now() time.Time { return c.Fake.Now().Add(time.Duration(c.offset.Load())) }

// A retry due in a minute when the clock is stepped an hour back runs
// about a minute later, not an hour and a minute: its due time, stored as
// a wall time, is moved to its delay from the stepped clock's now. It
// waited for the wall clock to come back to the old due time.
func TestRetryScheduledBeforeAClockStepBackKeepsItsDelay(t *testing.T) {
	t.Parallel()
	for _, spec := range []string{"sqlite::memory:", "postgres:" + testenv.NewSchema(t, "wf_stepback_")} {
		t.Run(strings.SplitN(spec, ":", 2)[0], func(t *testing.T) { retryKeepsItsDelay(t, spec) })
	}
}

func retryKeepsItsDelay(t *testing.T, spec string) {
	ws, _ := openCrashStore(t, spec)
	fake := clock.NewFake(t0)
	clk := &steppedClock{Fake: fake}
	h := newHarnessOn(t, nil, ws, workflow.Config{Clock: clk, LeaseDuration: 30 * time.Second})
	events := h.subscribe()
	flaky := h.task("flaky", func(ctx context.Context, tc *workflow.TaskContext) error {
		if tc.Attempt() == 1 {
			return errBoom
		}
		return nil
	})
	flaky.Retries = 1
	flaky.Strategy = retry.NewFixedDelay(time.Minute, false)
	h.register("stepback", nil, flaky)
	ctx, cancel := context.WithCancel(context.Background())
	h.ctx = ctx
	done, out := h.runAsync("stepback", workflow.RunOptions{ID: "r-step"})
	t.Cleanup(func() {
		cancel()
		<-done
	})
	ev := h.waitFor(events, done, upForRetry("flaky"))
	if want := t0.Add(time.Minute); !ev.NextAttemptAt.Equal(want) {
		t.Fatalf("retry at %v, want %v", ev.NextAttemptAt, want)
	}
	clk.offset.Store(int64(-time.Hour))
	// Elapsed time in steps of 10 s until the run ends: the driver sees
	// the step when it next wakes (at a renewal, or here, where the
	// renewals wait on the stepped clock as Go's monotonic timers would
	// not, when the retry's first timer fires a minute on), and the retry
	// runs a minute after that, two or three minutes on. A loaded machine
	// can delay when the driver looks (the steps do not wait for it to
	// have handled the last one), so the test allows half an hour: a retry
	// waiting for the old time would run 61 minutes on.
	ended := func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
	for step := 0; !ended(); step++ {
		if step == 180 {
			r, _ := h.engine.Get(context.Background(), "r-step")
			t.Fatalf("half an hour after a retry due in one, with the clock stepped back an hour, it has not run: %s %q",
				r.Task("flaky").State, r.Task("flaky").Reason)
		}
		fake.WaitForTimers(1, done)
		fake.Advance(10 * time.Second)
	}
	r, err := out()
	if err != nil || r.State != models.RunStateSuccess || h.callsOf("flaky") != 2 {
		t.Fatalf("run %v, %v; flaky ran %d times", r, err, h.callsOf("flaky"))
	}
}
