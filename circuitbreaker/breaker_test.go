package circuitbreaker

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"
)

func TestExecuteContextDone(t *testing.T) {
	t.Parallel()
	cb, _ := newTest(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	called := false
	if err := cb.Execute(ctx, func() error { called = true; return nil }); err != context.Canceled || called {
		t.Fatalf("Execute(done ctx) = %v, called %v", err, called)
	}
	if s := cb.GetStats(); s.TotalRequests != 0 || s.TotalRejected != 0 || s.TotalIgnored != 0 {
		t.Fatalf("a call with a done ctx was counted: %+v", s)
	}
}

func TestExecuteReturnsErrorUnchanged(t *testing.T) {
	t.Parallel()
	cb, _ := newTest(t, Config{})
	want := &customErr{}
	if err := cb.Execute(context.Background(), func() error { return want }); err != want {
		t.Fatalf("Execute = %v, want the same error", err)
	}
	v, err := ExecuteWithValue(context.Background(), cb, func() (int, error) { return 42, want })
	if v != 42 || err != want {
		t.Fatalf("ExecuteWithValue = %d, %v", v, err)
	}
	cb2, _ := newTest(t, Config{MaxFailures: 1})
	run(t, cb2, 1, errBoom)
	v, err = ExecuteWithValue(context.Background(), cb2, func() (int, error) { return 42, nil })
	if v != 0 || err != ErrCircuitOpen {
		t.Fatalf("ExecuteWithValue on open breaker = %d, %v", v, err)
	}
	if !errors.Is(err, ErrCircuitOpen) {
		t.Fatal("errors.Is(err, ErrCircuitOpen) is false")
	}
}

type customErr struct{}

func (*customErr) Error() string { return "custom" }

func TestPanicCountsAsFailure(t *testing.T) {
	t.Parallel()
	cb, fc := newTest(t, Config{MaxFailures: 1, Timeout: time.Second})
	panics := func() {
		defer func() {
			if recover() == nil {
				t.Fatal("panic was swallowed")
			}
		}()
		_ = cb.Execute(context.Background(), func() error { panic("fn") })
	}
	panics()
	wantState(t, cb, StateOpen)
	fc.Advance(time.Second)
	panics() // a panicking trial frees its slot and reopens
	wantState(t, cb, StateOpen)
	if s := cb.GetStats(); s.TotalFailures != 2 {
		t.Fatalf("TotalFailures = %d, want 2", s.TotalFailures)
	}
}

func TestStaleOutcomes(t *testing.T) {
	t.Parallel()
	cb, fc := newTest(t, Config{MaxFailures: 1, Timeout: time.Second})
	old, err := cb.Allow()
	if err != nil {
		t.Fatal(err)
	}
	run(t, cb, 1, errBoom)
	fc.Advance(time.Second)
	wantState(t, cb, StateHalfOpen)
	old.Done(nil) // from the closed generation: must not close the breaker
	wantState(t, cb, StateHalfOpen)
	old2, _ := cb.Allow() // the trial
	cb.Reset()
	old2.Done(errBoom) // from the half-open generation: must not open it
	wantState(t, cb, StateClosed)
	s := cb.GetStats()
	if s.TotalSuccesses != 1 || s.TotalFailures != 2 || s.ConsecutiveFailures != 0 || s.ConsecutiveSuccesses != 0 {
		t.Fatalf("stats: %+v", s)
	}
	var zero Permit
	zero.Done(errBoom) // no-op
}

func TestStats(t *testing.T) {
	t.Parallel()
	cb, fc := newTest(t, Config{MaxFailures: 3, Timeout: time.Minute})
	if s := cb.GetStats(); !s.LastStateChange.Equal(t0) || !s.LastFailure.IsZero() {
		t.Fatalf("fresh stats: %+v", s)
	}
	run(t, cb, 4, nil)
	fc.Advance(time.Second)
	run(t, cb, 1, errBoom)
	run(t, cb, 2, context.Canceled)
	run(t, cb, 1, nil)
	run(t, cb, 1, errBoom)
	fc.Advance(time.Second)
	run(t, cb, 2, errBoom) // opens
	wantRejected(t, cb)
	wantRejected(t, cb)
	s := cb.GetStats()
	want := Stats{
		State:                StateOpen,
		ConsecutiveFailures:  3,
		ConsecutiveSuccesses: 0,
		TotalRequests:        11,
		TotalSuccesses:       5,
		TotalFailures:        4,
		TotalIgnored:         2,
		TotalRejected:        2,
		WindowRequests:       9,
		WindowFailures:       4,
		LastStateChange:      t0.Add(2 * time.Second),
		LastFailure:          t0.Add(2 * time.Second),
		OpenUntil:            t0.Add(2*time.Second + time.Minute),
	}
	if !statsEqual(s, want) {
		t.Fatalf("GetStats:\n got %+v\nwant %+v", s, want)
	}
}

func statsEqual(a, b Stats) bool {
	ta := [3]time.Time{a.LastStateChange, a.LastFailure, a.OpenUntil}
	tb := [3]time.Time{b.LastStateChange, b.LastFailure, b.OpenUntil}
	for i := range ta {
		if !ta[i].Equal(tb[i]) {
			return false
		}
	}
	a.LastStateChange, a.LastFailure, a.OpenUntil = time.Time{}, time.Time{}, time.Time{}
	b.LastStateChange, b.LastFailure, b.OpenUntil = time.Time{}, time.Time{}, time.Time{}
	return a == b
}

func TestRealClock(t *testing.T) {
	t.Parallel()
	cb := New(&Config{MaxFailures: 1, Timeout: math.MaxInt64, Logger: slog.New(slog.DiscardHandler)})
	if !cb.realClock {
		t.Fatal("nil Clock is not read as the real clock")
	}
	before := time.Now()
	run(t, cb, 1, errBoom)
	s := cb.GetStats()
	if s.State != StateOpen || s.LastFailure.Before(before.Round(0)) || strings.Contains(s.LastFailure.String(), "m=") {
		t.Fatalf("stats on the real clock: %+v", s)
	}
	wantRejected(t, cb) // a Timeout that overflows keeps it open
	wantState(t, cb, StateOpen)
}

// An IsFailure that panics must not keep a half-open trial slot taken for
// ever: the call is recorded as ignored, and the panic reaches Done's
// caller. The slot used to leak, and with HalfOpenMaxRequests 1 the
// breaker rejected every call from then on.
func TestPanickingIsFailureFreesTheTrialSlot(t *testing.T) {
	t.Parallel()
	isFailure := func(err error) bool {
		if err.Error() == "odd" {
			panic("IsFailure panics")
		}
		return true
	}
	cb, fc := newTest(t, Config{MaxFailures: 1, Timeout: time.Second, HalfOpenMaxRequests: 1, IsFailure: isFailure})
	run(t, cb, 1, errBoom)
	fc.Advance(time.Second)
	wantState(t, cb, StateHalfOpen)
	p, err := cb.Allow()
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("Done swallowed IsFailure's panic")
			}
		}()
		p.Done(errors.New("odd"))
	}()
	wantState(t, cb, StateHalfOpen)
	run(t, cb, 1, nil) // the slot is free again: the next trial goes through
	wantState(t, cb, StateClosed)
	if s := cb.GetStats(); s.TotalFailures != 1 {
		t.Fatalf("TotalFailures = %d, want 1 (the ignored call not counted)", s.TotalFailures)
	}
}
