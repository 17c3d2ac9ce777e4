package circuitbreaker

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestConcurrentTotalsAddUp hammers one breaker from many goroutines while
// another moves the fake clock, so that it trips, half-opens and closes
// throughout, and checks that every call is accounted for exactly once.
func TestConcurrentTotalsAddUp(t *testing.T) {
	t.Parallel()
	var rec recorder
	cb, fc := newTest(t, Config{
		MaxFailures:          3,
		Timeout:              time.Millisecond,
		HalfOpenMaxRequests:  2,
		FailureRateThreshold: 0.9,
		MinimumRequests:      10,
		Window:               100 * time.Millisecond,
		OnStateChange:        rec.record,
	})
	const workers, calls = 32, 2000
	var ran, succeeded, failed, ignored, rejected atomic.Int64
	stop := make(chan struct{})
	clockDone := make(chan struct{})
	go func() { // the clock, and a reader of stats and state
		defer close(clockDone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			fc.Advance(100 * time.Microsecond)
			_ = cb.GetStats()
			_ = cb.State()
		}
	}()
	var wg sync.WaitGroup
	for g := 0; g < workers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < calls; i++ {
				var result error
				switch (g*calls + i) % 7 {
				case 0, 1:
					result = errBoom
				case 2:
					result = context.Canceled
				}
				var err error
				if i%2 == 0 {
					err = cb.Execute(context.Background(), func() error { ran.Add(1); return result })
				} else if p, aerr := cb.Allow(); aerr != nil {
					err = aerr
				} else {
					ran.Add(1)
					p.Done(result)
					err = result
				}
				switch {
				case err == ErrCircuitOpen:
					rejected.Add(1)
				case err == nil:
					succeeded.Add(1)
				case err == context.Canceled:
					ignored.Add(1)
				default:
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-clockDone

	s := cb.GetStats()
	if got := s.TotalRequests + s.TotalRejected; got != workers*calls {
		t.Errorf("requests %d + rejected %d = %d, want %d", s.TotalRequests, s.TotalRejected, got, workers*calls)
	}
	if s.TotalRequests != ran.Load() || s.TotalRejected != rejected.Load() {
		t.Errorf("TotalRequests %d, ran %d; TotalRejected %d, rejected %d", s.TotalRequests, ran.Load(), s.TotalRejected, rejected.Load())
	}
	if s.TotalSuccesses != succeeded.Load() || s.TotalFailures != failed.Load() || s.TotalIgnored != ignored.Load() {
		t.Errorf("successes %d/%d, failures %d/%d, ignored %d/%d (breaker/callers)",
			s.TotalSuccesses, succeeded.Load(), s.TotalFailures, failed.Load(), s.TotalIgnored, ignored.Load())
	}
	// Transitions are reported in order: each starts where the last ended.
	last := StateClosed
	for _, p := range rec.pairs() {
		if p[0] != last || p[0] == p[1] {
			t.Fatalf("transition %s->%s follows one ending at %s", p[0], p[1], last)
		}
		last = p[1]
	}
	if last != cb.State() && !(last == StateOpen && cb.State() == StateHalfOpen) {
		t.Errorf("last transition ends at %s, breaker is %s", last, cb.State())
	}
	if len(rec.transitions()) < 3 {
		t.Errorf("only %d transitions; the test meant to exercise them", len(rec.transitions()))
	}
}

// TestConcurrentTripReportsOnce fails many calls at once in the closed state
// and checks the breaker opens exactly once.
func TestConcurrentTripReportsOnce(t *testing.T) {
	t.Parallel()
	var rec recorder
	cb, _ := newTest(t, Config{MaxFailures: 5, OnStateChange: rec.record})
	var wg sync.WaitGroup
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = cb.Execute(context.Background(), fail)
		}()
	}
	wg.Wait()
	wantState(t, cb, StateOpen)
	if got := rec.transitions(); len(got) != 1 || got[0] != "closed->open" {
		t.Fatalf("transitions %v, want one closed->open", got)
	}
	s := cb.GetStats()
	if s.TotalFailures+s.TotalRejected != 64 {
		t.Fatalf("failures %d + rejected %d != 64", s.TotalFailures, s.TotalRejected)
	}
}

// TestHalfOpenLimitUnderConcurrency lets many goroutines race for three
// trial slots, holding the admitted calls until every other call has been
// rejected.
func TestHalfOpenLimitUnderConcurrency(t *testing.T) {
	t.Parallel()
	const limit, callers = 3, 40
	cb, fc := newTest(t, Config{MaxFailures: 1, Timeout: time.Second, HalfOpenMaxRequests: limit})
	run(t, cb, 1, errBoom)
	fc.Advance(time.Second)

	var running, maxRunning atomic.Int64
	started := make(chan struct{}, callers)
	rejectedc := make(chan struct{}, callers)
	release := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < callers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := cb.Execute(context.Background(), func() error {
				n := running.Add(1)
				for m := maxRunning.Load(); n > m && !maxRunning.CompareAndSwap(m, n); m = maxRunning.Load() {
				}
				started <- struct{}{}
				<-release
				running.Add(-1)
				return nil
			})
			if err == ErrCircuitOpen {
				rejectedc <- struct{}{}
			}
		}()
	}
	for i := 0; i < limit; i++ {
		<-started
	}
	for i := 0; i < callers-limit; i++ {
		<-rejectedc
	}
	close(release)
	wg.Wait()
	if got := maxRunning.Load(); got != limit {
		t.Fatalf("%d trial calls ran at once, want %d", got, limit)
	}
	wantState(t, cb, StateClosed)
	if s := cb.GetStats(); s.TotalRejected != callers-limit || s.TotalSuccesses != limit {
		t.Fatalf("rejected %d, successes %d", s.TotalRejected, s.TotalSuccesses)
	}
}
