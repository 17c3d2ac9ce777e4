package circuitbreaker

import (
	"math"
	"testing"
	"time"
)

func rateConfig() Config {
	return Config{
		MaxFailures:          math.MaxInt, // trip on the rate alone
		FailureRateThreshold: 0.5,
		MinimumRequests:      4,
		Window:               10 * time.Second, // 1s buckets
		Timeout:              time.Minute,
	}
}

func wantWindow(t *testing.T, cb *CircuitBreaker, requests, failures int64) {
	t.Helper()
	if s := cb.GetStats(); s.WindowRequests != requests || s.WindowFailures != failures {
		t.Fatalf("window = %d requests, %d failures; want %d, %d", s.WindowRequests, s.WindowFailures, requests, failures)
	}
}

func TestFailureRateNeedsMinimumRequests(t *testing.T) {
	t.Parallel()
	cb, _ := newTest(t, rateConfig())
	run(t, cb, 3, errBoom) // 100% but only 3 calls
	wantState(t, cb, StateClosed)
	run(t, cb, 1, errBoom) // 4 calls: trips at the minimum
	wantState(t, cb, StateOpen)
}

func TestFailureRateThreshold(t *testing.T) {
	t.Parallel()
	cb, _ := newTest(t, rateConfig())
	run(t, cb, 3, nil)
	run(t, cb, 2, errBoom) // 2/5 = 40%
	wantState(t, cb, StateClosed)
	run(t, cb, 1, errBoom) // 3/6 = 50%: trips
	wantState(t, cb, StateOpen)
}

func TestFailureRateOffByDefault(t *testing.T) {
	t.Parallel()
	cfg := rateConfig()
	cfg.FailureRateThreshold = 0
	cb, _ := newTest(t, cfg)
	for i := 0; i < 50; i++ {
		run(t, cb, 1, errBoom)
		run(t, cb, 1, nil)
	}
	wantState(t, cb, StateClosed)
	wantWindow(t, cb, 100, 50) // the window is kept for GetStats anyway
}

func TestWindowSlides(t *testing.T) {
	t.Parallel()
	cb, fc := newTest(t, rateConfig())
	run(t, cb, 3, errBoom) // in the bucket of [0s, 1s)
	fc.Advance(9*time.Second + 999*time.Millisecond)
	wantWindow(t, cb, 3, 3) // still inside the 10s window
	fc.Set(t0.Add(10 * time.Second))
	wantWindow(t, cb, 0, 0) // the first bucket has expired
	run(t, cb, 1, nil)
	run(t, cb, 1, errBoom) // 1/2, too few calls; with the old bucket it would trip
	wantState(t, cb, StateClosed)
	wantWindow(t, cb, 2, 1)

	// Buckets expire one at a time.
	fc.Advance(5 * time.Second)
	run(t, cb, 2, nil)
	wantWindow(t, cb, 4, 1)
	fc.Advance(5 * time.Second) // the calls at 10s expire, those at 15s stay
	wantWindow(t, cb, 2, 0)
	run(t, cb, 2, errBoom) // 2/4 = 50%
	wantState(t, cb, StateOpen)
	if s := cb.GetStats(); s.TotalRequests != 9 || s.TotalFailures != 6 {
		t.Fatalf("totals: %+v", s)
	}
}

func TestWindowWrapsManyTimes(t *testing.T) {
	t.Parallel()
	cb, fc := newTest(t, rateConfig())
	for i := 0; i < 35; i++ { // three and a half times round the ring
		run(t, cb, 1, nil)
		fc.Advance(time.Second)
	}
	wantWindow(t, cb, 9, 0) // the calls at 26s..34s; the clock reads 35s
	if s := cb.GetStats(); s.TotalSuccesses != 35 {
		t.Fatalf("TotalSuccesses = %d, want 35", s.TotalSuccesses)
	}
}

func TestWindowClearedOnClose(t *testing.T) {
	t.Parallel()
	cfg := rateConfig()
	cfg.Timeout = time.Second
	cb, fc := newTest(t, cfg)
	run(t, cb, 2, nil)
	run(t, cb, 2, errBoom)
	wantState(t, cb, StateOpen)
	fc.Advance(time.Second)
	run(t, cb, 1, nil) // trial closes the breaker
	wantState(t, cb, StateClosed)
	wantWindow(t, cb, 0, 0)
	run(t, cb, 1, errBoom) // the old failures must not count against it
	wantState(t, cb, StateClosed)
}

func TestOutcomeOlderThanItsBucket(t *testing.T) {
	t.Parallel()
	var w window
	w.width = 10
	w.add(105, false) // epoch 10 in bucket 0
	w.add(5, true)    // epoch 0, same bucket, older: totals only
	if s, f := w.counts(105); s != 1 || f != 0 {
		t.Fatalf("window counts = %d, %d", s, f)
	}
	if s, f := w.totals(); s != 1 || f != 1 {
		t.Fatalf("totals = %d, %d", s, f)
	}
}
