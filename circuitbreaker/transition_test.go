package circuitbreaker

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestClosedOpensAfterMaxFailures(t *testing.T) {
	t.Parallel()
	cb, _ := newTest(t, Config{MaxFailures: 3})
	run(t, cb, 2, errBoom)
	run(t, cb, 1, nil) // a success breaks the run
	run(t, cb, 2, errBoom)
	wantState(t, cb, StateClosed)
	if got := cb.GetStats().ConsecutiveFailures; got != 2 {
		t.Fatalf("ConsecutiveFailures = %d, want 2", got)
	}
	run(t, cb, 1, errBoom)
	wantState(t, cb, StateOpen)
	wantRejected(t, cb)
	if _, err := cb.Allow(); err != ErrCircuitOpen {
		t.Fatalf("Allow = %v, want ErrCircuitOpen", err)
	}
}

func TestOpenToHalfOpenExactlyAtTimeout(t *testing.T) {
	t.Parallel()
	cb, fc := newTest(t, Config{MaxFailures: 1, Timeout: 30 * time.Second})
	run(t, cb, 1, errBoom)
	fc.Advance(30*time.Second - time.Nanosecond)
	wantRejected(t, cb)
	wantState(t, cb, StateOpen)
	if s := cb.GetStats(); s.State != StateOpen || !s.OpenUntil.Equal(t0.Add(30*time.Second)) {
		t.Fatalf("GetStats = %s until %v", s.State, s.OpenUntil)
	}
	fc.Advance(time.Nanosecond)
	// The first call after the timeout is the trial.
	ran := false
	if err := cb.Execute(context.Background(), func() error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("trial call: err %v, ran %v", err, ran)
	}
	wantState(t, cb, StateClosed)
}

func TestLazyHalfOpenThroughStateAndStats(t *testing.T) {
	t.Parallel()
	for _, look := range []func(*CircuitBreaker) State{
		(*CircuitBreaker).State,
		func(cb *CircuitBreaker) State { return cb.GetStats().State },
	} {
		cb, fc := newTest(t, Config{MaxFailures: 1, Timeout: time.Minute})
		run(t, cb, 1, errBoom)
		fc.Advance(time.Minute)
		if got := look(cb); got != StateHalfOpen {
			t.Fatalf("state after timeout = %s, want half-open", got)
		}
		if got := cb.GetStats().LastStateChange; !got.Equal(t0.Add(time.Minute)) {
			t.Fatalf("LastStateChange = %v", got)
		}
	}
}

func TestHalfOpenConcurrencyLimit(t *testing.T) {
	t.Parallel()
	cb, fc := newTest(t, Config{MaxFailures: 1, Timeout: time.Second, HalfOpenMaxRequests: 2})
	run(t, cb, 1, errBoom)
	fc.Advance(time.Second)
	p1, err1 := cb.Allow()
	p2, err2 := cb.Allow()
	if err1 != nil || err2 != nil {
		t.Fatalf("trial calls rejected: %v, %v", err1, err2)
	}
	wantState(t, cb, StateHalfOpen)
	if _, err := cb.Allow(); err != ErrCircuitOpen {
		t.Fatalf("third trial call: %v, want ErrCircuitOpen", err)
	}
	wantRejected(t, cb)
	p1.Done(nil) // frees a slot; one success of two needed
	wantState(t, cb, StateHalfOpen)
	if s := cb.GetStats(); s.ConsecutiveSuccesses != 1 {
		t.Fatalf("ConsecutiveSuccesses = %d, want 1", s.ConsecutiveSuccesses)
	}
	p3, err := cb.Allow()
	if err != nil {
		t.Fatalf("call after a slot freed: %v", err)
	}
	if _, err := cb.Allow(); err != ErrCircuitOpen {
		t.Fatalf("over the limit again: %v", err)
	}
	p2.Done(nil)
	wantState(t, cb, StateClosed)
	p3.Done(errBoom) // admitted in the half-open generation: totals only
	wantState(t, cb, StateClosed)
	if s := cb.GetStats(); s.ConsecutiveFailures != 0 || s.TotalFailures != 2 || s.TotalRejected != 3 {
		t.Fatalf("stats after stale failure: %+v", s)
	}
}

func TestHalfOpenFailureReopensAndRestartsTimeout(t *testing.T) {
	t.Parallel()
	cb, fc := newTest(t, Config{MaxFailures: 2, Timeout: 10 * time.Second, HalfOpenMaxRequests: 3})
	run(t, cb, 2, errBoom)
	fc.Advance(10 * time.Second)
	run(t, cb, 2, nil) // two of three trials succeed
	wantState(t, cb, StateHalfOpen)
	fc.Advance(4 * time.Second)
	run(t, cb, 1, errBoom)
	wantState(t, cb, StateOpen)
	reopened := t0.Add(14 * time.Second)
	if s := cb.GetStats(); !s.OpenUntil.Equal(reopened.Add(10*time.Second)) || !s.LastStateChange.Equal(reopened) {
		t.Fatalf("after reopening: OpenUntil %v, LastStateChange %v", s.OpenUntil, s.LastStateChange)
	}
	fc.Advance(10*time.Second - time.Nanosecond)
	wantRejected(t, cb)
	fc.Advance(time.Nanosecond)
	run(t, cb, 3, nil)
	wantState(t, cb, StateClosed)
}

func TestOnStateChangeSequence(t *testing.T) {
	t.Parallel()
	var rec recorder
	var cb *CircuitBreaker
	cb, fc := newTest(t, Config{MaxFailures: 1, Timeout: time.Second, OnStateChange: func(from, to State) {
		rec.record(from, to)
		if s := cb.GetStats(); s.State != to { // must not deadlock
			t.Errorf("in OnStateChange(%s, %s): GetStats().State = %s", from, to, s.State)
		}
	}})
	run(t, cb, 1, errBoom) // closed -> open
	fc.Advance(time.Second)
	run(t, cb, 1, errBoom) // open -> half-open -> open
	fc.Advance(time.Second)
	run(t, cb, 1, nil) // open -> half-open -> closed
	run(t, cb, 1, errBoom)
	cb.Reset() // open -> closed
	cb.Reset() // no change, no call
	want := []string{
		"closed->open",
		"open->half-open", "half-open->open",
		"open->half-open", "half-open->closed",
		"closed->open", "open->closed",
	}
	if got := rec.transitions(); !equalStrings(got, want) {
		t.Fatalf("transitions:\n got %v\nwant %v", got, want)
	}
}

func TestOnStateChangeMayTransition(t *testing.T) {
	t.Parallel()
	var rec recorder
	var cb *CircuitBreaker
	cb, _ = newTest(t, Config{MaxFailures: 1, OnStateChange: func(from, to State) {
		rec.record(from, to)
		if to == StateOpen {
			cb.Reset() // re-entrant transition: reported after this call
		}
	}})
	run(t, cb, 1, errBoom)
	wantState(t, cb, StateClosed)
	if got, want := rec.transitions(), []string{"closed->open", "open->closed"}; !equalStrings(got, want) {
		t.Fatalf("transitions %v, want %v", got, want)
	}
}

func TestOnStateChangePanicDoesNotWedge(t *testing.T) {
	t.Parallel()
	var rec recorder
	cb, _ := newTest(t, Config{MaxFailures: 1, OnStateChange: func(from, to State) {
		rec.record(from, to)
		if to == StateOpen {
			panic("callback")
		}
	}})
	func() {
		defer func() { _ = recover() }()
		run(t, cb, 1, errBoom)
	}()
	cb.Reset()
	if got, want := rec.transitions(), []string{"closed->open", "open->closed"}; !equalStrings(got, want) {
		t.Fatalf("transitions %v, want %v", got, want)
	}
}

func TestReset(t *testing.T) {
	t.Parallel()
	cb, fc := newTest(t, Config{MaxFailures: 2})
	run(t, cb, 1, nil)
	run(t, cb, 2, errBoom)
	wantState(t, cb, StateOpen)
	fc.Advance(time.Second)
	cb.Reset()
	wantState(t, cb, StateClosed)
	s := cb.GetStats()
	if s.ConsecutiveFailures != 0 || s.ConsecutiveSuccesses != 0 || s.WindowRequests != 0 || s.WindowFailures != 0 {
		t.Fatalf("counters not cleared: %+v", s)
	}
	if s.TotalRequests != 3 || s.TotalFailures != 2 || s.TotalSuccesses != 1 {
		t.Fatalf("totals not kept: %+v", s)
	}
	if !s.LastStateChange.Equal(t0.Add(time.Second)) || !s.OpenUntil.IsZero() {
		t.Fatalf("LastStateChange %v, OpenUntil %v", s.LastStateChange, s.OpenUntil)
	}
	// Reset of a closed breaker clears its run of failures.
	run(t, cb, 1, errBoom)
	cb.Reset()
	run(t, cb, 1, errBoom)
	wantState(t, cb, StateClosed)
}

func TestTransitionsAreLogged(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	cb, fc := newTest(t, Config{Name: "billing-api", MaxFailures: 2, Timeout: time.Second, Logger: logger})
	if cb.Name() != "billing-api" {
		t.Fatalf("Name() = %q", cb.Name())
	}
	run(t, cb, 2, errBoom)
	fc.Advance(time.Second)
	run(t, cb, 1, nil)
	want := []string{
		`{"level":"WARN","msg":"circuit breaker state changed","breaker":"billing-api","from":"closed","to":"open","consecutive_failures":2,"window_requests":2,"window_failures":2}`,
		`{"level":"INFO","msg":"circuit breaker state changed","breaker":"billing-api","from":"open","to":"half-open","consecutive_failures":0,"window_requests":2,"window_failures":2}`,
		`{"level":"INFO","msg":"circuit breaker state changed","breaker":"billing-api","from":"half-open","to":"closed","consecutive_failures":0,"window_requests":0,"window_failures":0}`,
	}
	if got := strings.Split(strings.TrimSpace(buf.String()), "\n"); !equalStrings(got, want) {
		t.Fatalf("log:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
