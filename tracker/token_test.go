package tracker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"
)

func TestZeroTokenIsExpiredAndUsable(t *testing.T) {
	t.Parallel()
	var z RetryToken
	if !z.Expired() || z.Never() || !z.Deadline().IsZero() || z.Remaining() != 0 {
		t.Fatalf("zero token: expired=%v never=%v deadline=%v remaining=%v",
			z.Expired(), z.Never(), z.Deadline(), z.Remaining())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := z.Wait(ctx); err != nil {
		t.Fatalf("Wait on an expired token = %v, want nil even with ctx done", err)
	}
	if !z.And(z).Expired() || !z.Or(z).Expired() || !All().Expired() {
		t.Fatal("compositions of expired tokens must be expired")
	}
}

func TestTokenDeadlines(t *testing.T) {
	t.Parallel()
	c := newFake()
	tok := NewRetryToken(c, t0.Add(3*time.Second))
	wantDeadline(t, tok, t0.Add(3*time.Second))
	if tok.Expired() || tok.Remaining() != 3*time.Second {
		t.Fatalf("expired=%v remaining=%v", tok.Expired(), tok.Remaining())
	}
	c.Advance(3*time.Second - time.Nanosecond)
	if tok.Expired() || tok.Remaining() != time.Nanosecond {
		t.Fatalf("1ns before: expired=%v remaining=%v", tok.Expired(), tok.Remaining())
	}
	c.Advance(time.Nanosecond)
	if !tok.Expired() || tok.Remaining() != 0 {
		t.Fatalf("at deadline: expired=%v remaining=%v", tok.Expired(), tok.Remaining())
	}
}

func TestNeverToken(t *testing.T) {
	t.Parallel()
	c := newFake()
	for _, n := range []RetryToken{Never(c), NewRetryToken(c, Forever), NewRetryToken(c, Forever.Add(time.Hour)), Any()} {
		c.Advance(1000 * time.Hour)
		if n.Expired() || !n.Never() || !n.Deadline().Equal(Forever) || n.Remaining() != math.MaxInt64 {
			t.Fatalf("never token: expired=%v never=%v deadline=%v remaining=%v",
				n.Expired(), n.Never(), n.Deadline(), n.Remaining())
		}
	}
}

// TestCompositionTruthTables checks And, Or, All, Any and their nestings
// against the boolean formulas they stand for, at moments before, at and
// after each deadline.
func TestCompositionTruthTables(t *testing.T) {
	t.Parallel()
	c := newFake()
	toks := map[string]RetryToken{
		"zero":  {},
		"1s":    NewRetryToken(c, t0.Add(time.Second)),
		"2s":    NewRetryToken(c, t0.Add(2*time.Second)),
		"3s":    NewRetryToken(c, t0.Add(3*time.Second)),
		"never": Never(c),
	}
	steps := []time.Duration{0, 999 * time.Millisecond, time.Millisecond, time.Second, time.Second, time.Hour}
	for _, step := range steps {
		c.Advance(step)
		at := c.Now().Sub(t0)
		for an, a := range toks {
			ea := a.Expired()
			for bn, b := range toks {
				eb := b.Expired()
				check := func(name string, tok RetryToken, want bool) {
					t.Helper()
					if got := tok.Expired(); got != want {
						t.Errorf("at +%v: %s = %v, want %v", at, name, got, want)
					}
				}
				check(fmt.Sprintf("%s AND %s", an, bn), a.And(b), ea && eb)
				check(fmt.Sprintf("%s OR %s", an, bn), a.Or(b), ea || eb)
				check(fmt.Sprintf("All(%s, %s)", an, bn), All(a, b), ea && eb)
				check(fmt.Sprintf("Any(%s, %s)", an, bn), Any(a, b), ea || eb)
				for cn, x := range toks {
					ex := x.Expired()
					check(fmt.Sprintf("(%s AND %s) OR %s", an, bn, cn), a.And(b).Or(x), (ea && eb) || ex)
					check(fmt.Sprintf("(%s OR %s) AND %s", an, bn, cn), a.Or(b).And(x), (ea || eb) && ex)
					check(fmt.Sprintf("%s AND (%s OR %s)", an, bn, cn), a.And(b.Or(x)), ea && (eb || ex))
					check(fmt.Sprintf("Any(All(%s, %s), %s)", an, bn, cn), Any(All(a, b), x), (ea && eb) || ex)
				}
			}
		}
	}
}

func TestCompositionDeadlines(t *testing.T) {
	t.Parallel()
	c := newFake()
	a := NewRetryToken(c, t0.Add(time.Second))
	b := NewRetryToken(c, t0.Add(5*time.Second))
	x := NewRetryToken(c, t0.Add(3*time.Second))
	n := Never(c)
	wantDeadline(t, a.And(b), t0.Add(5*time.Second))
	wantDeadline(t, b.And(a), t0.Add(5*time.Second))
	wantDeadline(t, a.Or(b), t0.Add(time.Second))
	wantDeadline(t, a.And(b).Or(x), t0.Add(3*time.Second))
	wantDeadline(t, a.Or(b).And(x), t0.Add(3*time.Second))
	wantDeadline(t, All(a, b, x), t0.Add(5*time.Second))
	wantDeadline(t, Any(b, x, a), t0.Add(time.Second))
	if !n.And(a).Never() || !a.And(n).Never() || !All(a, n, b).Never() {
		t.Fatal("never AND x must never expire")
	}
	wantDeadline(t, n.Or(b), t0.Add(5*time.Second))
	wantDeadline(t, b.Or(n), t0.Add(5*time.Second))
	wantDeadline(t, n.And(a).Or(x), t0.Add(3*time.Second))
	if !n.Or(n).Never() {
		t.Fatal("never OR never must never expire")
	}
	// The clock travels with the composition, even from a zero token.
	var z RetryToken
	if got := z.And(b); got.clk != c || got.Expired() {
		t.Fatal("zero AND b must run on b's clock and wait for b")
	}
}

func TestWaitReturnsWhenClockReachesDeadline(t *testing.T) {
	t.Parallel()
	c := newFake()
	tok := NewRetryToken(c, t0.Add(5*time.Second)).And(NewRetryToken(c, t0.Add(2*time.Second)))
	done := make(chan error, 1)
	go func() { done <- tok.Wait(context.Background()) }()
	if !c.WaitForTimers(1, nil) {
		t.Fatal("Wait made no timer")
	}
	c.Advance(5*time.Second - time.Nanosecond)
	select {
	case err := <-done:
		t.Fatalf("Wait returned %v before the deadline", err)
	default:
	}
	if c.Pending() != 1 {
		t.Fatalf("pending timers = %d, want 1", c.Pending())
	}
	c.Advance(time.Nanosecond)
	if err := <-done; err != nil {
		t.Fatalf("Wait = %v, want nil", err)
	}
}

func TestWaitRespectsContext(t *testing.T) {
	t.Parallel()
	c := newFake()
	for _, tok := range []RetryToken{NewRetryToken(c, t0.Add(time.Hour)), Never(c)} {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- tok.Wait(ctx) }()
		if !tok.Never() && !c.WaitForTimers(1, nil) {
			t.Fatal("Wait made no timer")
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait = %v, want context.Canceled", err)
		}
		if c.Pending() != 0 {
			t.Fatalf("pending timers after cancel = %d, want 0 (timer stopped)", c.Pending())
		}
	}
	// A context already done returns at once, without a timer.
	ctx, cancel := context.WithTimeout(context.Background(), -time.Second)
	defer cancel()
	if err := NewRetryToken(c, t0.Add(time.Hour)).Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait = %v, want context.DeadlineExceeded", err)
	}
	if c.Pending() != 0 {
		t.Fatal("Wait on a done context made a timer")
	}
}

func TestWaitRealClockExpiredToken(t *testing.T) {
	t.Parallel()
	tok := NewRetryToken(nil, time.Now().Add(-time.Second))
	if err := tok.Wait(context.Background()); err != nil {
		t.Fatalf("Wait on a past deadline = %v", err)
	}
}
