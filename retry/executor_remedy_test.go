package retry_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/retry"
)

var errOffset = errors.New("offset mismatch")

func TestExecuteRecognisedRemediesThenPromotes(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		maxRemedies, remedies int
	}{
		"default bound": {0, errorhandling.DefaultMaxRemedies},
		"bound 1":       {1, 1},
		"bound 5":       {5, 5},
	} {
		fake := newFake()
		var remedies atomic.Int32
		recognised := errorhandling.Recognised(errOffset, func(context.Context) error {
			remedies.Add(1)
			return nil
		})
		fn, calls := failing(-1, recognised)
		var retried []int
		cfg := retry.NewConfig(2, retry.NewFixedDelay(time.Second, false)).WithClock(fake).WithMaxRemedies(c.maxRemedies).
			WithRetryCallback(func(attempt int, _ error) { retried = append(retried, attempt) })
		ex := retry.NewExecutor(cfg)
		waits, err := drive(t, fake, func() error { return ex.Execute(context.Background(), fn) })
		// c.remedies remedied tries at once, then 2 counted tries, one wait.
		total := c.remedies + 2
		e := asError(t, err, retry.Exhausted, total)
		if int(remedies.Load()) != c.remedies || int(calls.Load()) != total || e.Last != recognised {
			t.Errorf("%s: remedies = %d, calls = %d, err = %v", name, remedies.Load(), calls.Load(), err)
		}
		equalWaits(t, waits, time.Second)
		if len(retried) != total-1 || retried[0] != 1 || retried[len(retried)-1] != total-1 {
			t.Errorf("%s: OnRetry attempts = %v", name, retried)
		}
	}
}

func TestExecuteRecognisedRemedyWorks(t *testing.T) {
	t.Parallel()
	fake := newFake()
	ctx := context.WithValue(context.Background(), ctxKey{}, "v")
	var remedied bool
	fn, calls := failing(1, errorhandling.Recognised(errOffset, func(ctx context.Context) error {
		if ctx.Value(ctxKey{}) != "v" {
			t.Error("remedy did not get Execute's ctx")
		}
		remedied = true
		return nil
	}))
	ex := retry.NewExecutor(retry.NewConfig(1, retry.NewFixedDelay(time.Hour, false)).WithClock(fake))
	waits, err := drive(t, fake, func() error { return ex.Execute(ctx, fn) })
	if err != nil || !remedied || calls.Load() != 2 {
		t.Fatalf("err = %v, remedied = %v, calls = %d", err, remedied, calls.Load())
	}
	equalWaits(t, waits) // a remedied try does not back off
}

func TestExecuteRecognisedNilRemedy(t *testing.T) {
	t.Parallel()
	fn, calls := failing(-1, errorhandling.Recognised(errOffset, nil))
	err := retry.NewExecutor(retry.NewConfig(2, retry.NewFixedDelay(0, false))).Execute(context.Background(), fn)
	asError(t, err, retry.Exhausted, errorhandling.DefaultMaxRemedies+2)
	if calls.Load() != errorhandling.DefaultMaxRemedies+2 {
		t.Errorf("calls = %d", calls.Load())
	}
}

func TestExecuteRecognisedFailingRemedyBacksOff(t *testing.T) {
	t.Parallel()
	fake := newFake()
	var remedies atomic.Int32
	fn, calls := failing(-1, errorhandling.Recognised(errOffset, func(context.Context) error {
		remedies.Add(1)
		return errors.New("cannot re-sync")
	}))
	ex := retry.NewExecutor(retry.NewConfig(3, retry.NewExponentialBackoff(time.Second, time.Minute, false)).WithClock(fake))
	waits, err := drive(t, fake, func() error { return ex.Execute(context.Background(), fn) })
	asError(t, err, retry.Exhausted, 3)
	equalWaits(t, waits, time.Second, 2*time.Second)
	if calls.Load() != 3 || remedies.Load() != 3 {
		t.Errorf("calls = %d, remedies = %d", calls.Load(), remedies.Load())
	}
}

func TestExecuteRecognisedHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	fake := newFake()
	fn, _ := failing(1, errorhandling.RetryAfter(errorhandling.Recognised(errOffset, nil), 2*time.Second))
	ex := retry.NewExecutor(retry.NewConfig(1, nil).WithClock(fake))
	waits, err := drive(t, fake, func() error { return ex.Execute(context.Background(), fn) })
	if err != nil {
		t.Fatal(err)
	}
	equalWaits(t, waits, 2*time.Second)
}

func TestExecuteRecognisedIgnoresCodesUntilPromoted(t *testing.T) {
	t.Parallel()
	fn, calls := failing(-1, errorhandling.Recognised(errOffset, nil))
	cfg := retry.NewConfig(5, retry.NewFixedDelay(0, false)).WithRetryOnErrorCodes("timeout").WithMaxRemedies(2)
	err := retry.NewExecutor(cfg).Execute(context.Background(), fn)
	asError(t, err, retry.NotRetryable, 3)
	if calls.Load() != 3 {
		t.Errorf("calls = %d, want 3", calls.Load())
	}
}

func TestExecuteCancelledWhileWaiting(t *testing.T) {
	t.Parallel()
	fake := newFake()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fn, calls := failing(-1, errFlaky)
	var retries atomic.Int32
	cfg := retry.NewConfig(5, retry.NewFixedDelay(time.Hour, false)).WithClock(fake).
		WithRetryCallback(func(int, error) { retries.Add(1) }).
		WithGiveUpCallback(func(error) { t.Error("OnGiveUp called on cancellation") })
	done := make(chan error, 1)
	go func() { done <- retry.NewExecutor(cfg).Execute(ctx, fn) }()
	if !fake.WaitForTimers(1, nil) {
		t.Fatal("executor never waited")
	}
	cancel() // the clock does not move: the wait must end on its own
	err := <-done
	e := asError(t, err, retry.Cancelled, 1)
	if !errors.Is(err, retry.ErrCancelled) || !errors.Is(err, context.Canceled) || !errors.Is(err, errFlaky) || e.Last != errFlaky {
		t.Errorf("err = %v", err)
	}
	if calls.Load() != 1 || retries.Load() != 1 {
		t.Errorf("calls = %d, retries = %d", calls.Load(), retries.Load())
	}
	if n := fake.Pending(); n != 0 {
		t.Errorf("%d timers left pending", n)
	}
}

func TestExecuteCancelledBeforeFirstTry(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := retry.NewExecutor(retry.DefaultConfig()).Execute(ctx, func() error {
		t.Error("fn called with a done context")
		return nil
	})
	e := asError(t, err, retry.Cancelled, 0)
	if e.Last != nil || !errors.Is(err, context.Canceled) || !errors.Is(err, retry.ErrCancelled) {
		t.Errorf("err = %v", err)
	}
	if got, want := err.Error(), "retry: cancelled before the first attempt: context canceled"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if _, err := retry.ExecuteWithValue(ctx, nil, func() (int, error) {
		t.Error("fn called with a done context")
		return 0, nil
	}); !errors.Is(err, retry.ErrCancelled) {
		t.Errorf("ExecuteWithValue err = %v", err)
	}
}

func TestExecuteCancelledDuringTry(t *testing.T) {
	t.Parallel()
	fake := newFake()
	errShutdown := errors.New("shutting down")
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	ex := retry.NewExecutor(retry.NewConfig(5, retry.NewFixedDelay(time.Hour, false)).WithClock(fake))
	err := ex.Execute(ctx, func() error {
		cancel(errShutdown)
		return errFlaky
	})
	asError(t, err, retry.Cancelled, 1)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, errShutdown) || !errors.Is(err, errFlaky) {
		t.Errorf("err = %v", err)
	}
	if got, want := err.Error(), "retry: cancelled after 1 attempt: context canceled: shutting down; last error: flaky"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if fake.Pending() != 0 {
		t.Error("executor started a wait after its context was done")
	}
}

func TestExecuteSucceedsDespiteCancelDuringTry(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	err := retry.NewExecutor(retry.DefaultConfig()).Execute(ctx, func() error {
		cancel()
		return nil
	})
	if err != nil {
		t.Errorf("err = %v, want nil: the try succeeded", err)
	}
}
