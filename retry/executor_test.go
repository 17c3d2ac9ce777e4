package retry_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/retry"
)

var errFlaky = errors.New("flaky")

// drive runs f in a goroutine and, from the test goroutine, moves fake to
// each timer f waits on until f returns. It returns the waits observed and
// f's result.
func drive(t *testing.T, fake *clock.Fake, f func() error) ([]time.Duration, error) {
	t.Helper()
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		err = f()
	}()
	var waits []time.Duration
	for {
		d, ok := fake.AdvanceToNext(done)
		if !ok {
			break
		}
		waits = append(waits, d)
		if len(waits) > 100 {
			t.Fatal("more than 100 waits")
		}
	}
	return waits, err
}

func newFake() *clock.Fake { return clock.NewFake(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)) }

// failing returns an operation that fails with errs[i] on call i (the last
// error repeating), succeeding after ok failures when ok >= 0, and a counter
// of its calls.
func failing(ok int, errs ...error) (func() error, *atomic.Int32) {
	var calls atomic.Int32
	return func() error {
		n := int(calls.Add(1)) - 1
		if ok >= 0 && n >= ok {
			return nil
		}
		return errs[min(n, len(errs)-1)]
	}, &calls
}

func asError(t *testing.T, err error, reason retry.StopReason, attempts int) *retry.Error {
	t.Helper()
	var e *retry.Error
	if !errors.As(err, &e) {
		t.Fatalf("err = %v (%T), want *retry.Error", err, err)
	}
	if e.Reason != reason || e.Attempts != attempts {
		t.Fatalf("err = {Reason: %v, Attempts: %d}, want {%v, %d} (%v)", e.Reason, e.Attempts, reason, attempts, err)
	}
	return e
}

func equalWaits(t *testing.T, got []time.Duration, want ...time.Duration) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("waits = %v, want %v", got, want)
	}
}

func TestExecuteFirstTrySucceeds(t *testing.T) {
	t.Parallel()
	fake := newFake()
	fn, calls := failing(0, errFlaky)
	ex := retry.NewExecutor(retry.NewConfig(3, retry.NewFixedDelay(time.Second, false)).WithClock(fake))
	waits, err := drive(t, fake, func() error { return ex.Execute(context.Background(), fn) })
	if err != nil || calls.Load() != 1 {
		t.Fatalf("err = %v, calls = %d; want nil, 1", err, calls.Load())
	}
	equalWaits(t, waits)
}

func TestExecuteBacksOffThenSucceeds(t *testing.T) {
	t.Parallel()
	fake := newFake()
	fn, calls := failing(2, errFlaky)
	ex := retry.NewExecutor(retry.NewConfig(3, retry.NewExponentialBackoff(time.Second, time.Minute, false)).WithClock(fake))
	waits, err := drive(t, fake, func() error { return ex.Execute(context.Background(), fn) })
	if err != nil || calls.Load() != 3 {
		t.Fatalf("err = %v, calls = %d; want nil, 3", err, calls.Load())
	}
	equalWaits(t, waits, time.Second, 2*time.Second)
}

func TestExecuteExhausted(t *testing.T) {
	t.Parallel()
	fake := newFake()
	fn, calls := failing(-1, errFlaky)
	ex := retry.NewExecutor(retry.NewConfig(4, retry.NewExponentialBackoff(time.Second, 3*time.Second, false)).WithClock(fake))
	waits, err := drive(t, fake, func() error { return ex.Execute(context.Background(), fn) })
	e := asError(t, err, retry.Exhausted, 4)
	equalWaits(t, waits, time.Second, 2*time.Second, 3*time.Second)
	if calls.Load() != 4 || e.Last != errFlaky || !errors.Is(err, errFlaky) || !errors.Is(err, retry.ErrExhausted) {
		t.Errorf("calls = %d, err = %v", calls.Load(), err)
	}
	if errors.Is(err, retry.ErrPermanent) || errors.Is(err, retry.ErrCancelled) || errors.Is(err, context.Canceled) {
		t.Errorf("err %v matches a sentinel it must not", err)
	}
}

func TestExecuteMaxAttemptsBelowOne(t *testing.T) {
	t.Parallel()
	for _, cfg := range []*retry.Config{retry.NewConfig(0, nil), retry.NewConfig(-3, nil), {}} {
		fn, calls := failing(-1, errFlaky)
		err := retry.NewExecutor(cfg).Execute(context.Background(), fn)
		asError(t, err, retry.Exhausted, 1)
		if calls.Load() != 1 {
			t.Errorf("calls = %d, want 1", calls.Load())
		}
	}
}

func TestExecuteStrategyStop(t *testing.T) {
	t.Parallel()
	fn, calls := failing(-1, errFlaky)
	err := retry.NewExecutor(retry.NewConfig(5, retry.NewNoRetry())).Execute(context.Background(), fn)
	asError(t, err, retry.Exhausted, 1)
	if calls.Load() != 1 {
		t.Errorf("calls = %d, want 1", calls.Load())
	}

	fake := newFake()
	fn, calls = failing(-1, errFlaky)
	stopAt2 := strategyFunc(func(n int) time.Duration {
		if n >= 2 {
			return retry.Stop
		}
		return 7 * time.Second
	})
	ex := retry.NewExecutor(retry.NewConfig(10, stopAt2).WithClock(fake))
	waits, err := drive(t, fake, func() error { return ex.Execute(context.Background(), fn) })
	asError(t, err, retry.Exhausted, 2)
	equalWaits(t, waits, 7*time.Second)
	if calls.Load() != 2 {
		t.Errorf("calls = %d, want 2", calls.Load())
	}
}

type strategyFunc func(int) time.Duration

func (f strategyFunc) Delay(n int) time.Duration { return f(n) }

func TestExecuteCallbacks(t *testing.T) {
	t.Parallel()
	fake := newFake()
	e1, e2, e3 := errors.New("one"), errors.New("two"), errors.New("three")
	fn, _ := failing(-1, e1, e2, e3)
	type call struct {
		attempt int
		err     error
		at      time.Duration
	}
	start := fake.Now()
	var mu sync.Mutex
	var retries []call
	var gaveUp []error
	cfg := retry.NewConfig(3, retry.NewExponentialBackoff(time.Second, time.Minute, false)).
		WithClock(fake).
		WithRetryCallback(func(attempt int, err error) {
			mu.Lock()
			defer mu.Unlock()
			retries = append(retries, call{attempt, err, fake.Now().Sub(start)})
		}).
		WithGiveUpCallback(func(err error) {
			mu.Lock()
			defer mu.Unlock()
			gaveUp = append(gaveUp, err)
		})
	ex := retry.NewExecutor(cfg)
	waits, err := drive(t, fake, func() error { return ex.Execute(context.Background(), fn) })
	equalWaits(t, waits, time.Second, 2*time.Second)
	mu.Lock()
	defer mu.Unlock()
	// Called before each wait, with the try that just failed.
	want := []call{{1, e1, 0}, {2, e2, time.Second}}
	if fmt.Sprint(retries) != fmt.Sprint(want) {
		t.Errorf("OnRetry calls = %v, want %v", retries, want)
	}
	if len(gaveUp) != 1 || gaveUp[0] != err || !errors.Is(gaveUp[0], e3) {
		t.Errorf("OnGiveUp calls = %v, want [%v]", gaveUp, err)
	}
}

func TestExecuteNoGiveUpOnSuccess(t *testing.T) {
	t.Parallel()
	fn, _ := failing(1, errFlaky)
	var retries []int
	cfg := retry.NewConfig(3, retry.NewFixedDelay(0, false)).
		WithRetryCallback(func(attempt int, _ error) { retries = append(retries, attempt) }).
		WithGiveUpCallback(func(error) { t.Error("OnGiveUp called on success") })
	if err := retry.NewExecutor(cfg).Execute(context.Background(), fn); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(retries) != "[1]" {
		t.Errorf("OnRetry attempts = %v, want [1]", retries)
	}
}

func TestExecuteConcurrentUse(t *testing.T) {
	t.Parallel()
	var retries atomic.Int32
	ex := retry.NewExecutor(retry.NewConfig(3, retry.NewFixedDelay(0, true)).
		WithRetryCallback(func(int, error) { retries.Add(1) }))
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			fn, calls := failing(2, errFlaky)
			if err := ex.Execute(context.Background(), fn); err != nil || calls.Load() != 3 {
				t.Errorf("err = %v, calls = %d", err, calls.Load())
			}
		})
	}
	wg.Wait()
	if retries.Load() != 32 {
		t.Errorf("retries = %d, want 32", retries.Load())
	}
}
