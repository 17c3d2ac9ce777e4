package relay

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/transport"
)

// waitDone waits for ctx to end, failing the test after 10 s.
func waitDone(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: the attempt's context did not end", what)
	}
}

// TestAttemptContextEndsAsItsTwoContextsWould: an attempt's context, made
// only when something waits on it, ends as leaseBound under withTimeout
// did: at its deadline (DeadlineExceeded), when the lease lapses or is
// found gone (cause errLeaseLapsed), when the relay's delivery context
// ends, and when the delivery returns; whether its end is first seen by
// Done, by Err, or by context.Cause through Value.
func TestAttemptContextEndsAsItsTwoContextsWould(t *testing.T) {
	parent, stop := context.WithCancel(context.Background())
	defer stop()
	r := &Relay{clk: clock.Real, fl: newFlights(), deliverCtx: parent}
	held := func() time.Time { return time.Now().Add(time.Hour) }

	t.Run("a handler that never waits", func(t *testing.T) {
		a, release := r.attemptContext(holdFlight(r.fl, held(), false), time.Now(), time.Minute)
		if err := a.Err(); err != nil {
			t.Fatalf("at the start: Err = %v", err)
		}
		if d, ok := a.Deadline(); !ok || time.Until(d) < 50*time.Second {
			t.Fatalf("Deadline = %v, %v; want about a minute on", d, ok)
		}
		if a.armed.Load() != nil {
			t.Fatal("Err and Deadline made the contexts: nothing waited")
		}
		release()
		if err := a.Err(); !errors.Is(err, context.Canceled) {
			t.Fatalf("after the delivery returned: Err = %v, want context.Canceled", err)
		}
		waitDone(t, a, "released")
		if a.leaseLapsed() {
			t.Fatal("released: leaseLapsed")
		}
	})

	t.Run("deadline, waited for", func(t *testing.T) {
		a, release := r.attemptContext(holdFlight(r.fl, held(), false), time.Now(), 20*time.Millisecond)
		defer release()
		waitDone(t, a, "20 ms deadline")
		if !errors.Is(a.Err(), context.DeadlineExceeded) || !errors.Is(context.Cause(a), context.DeadlineExceeded) {
			t.Fatalf("past the deadline: Err %v, Cause %v; want DeadlineExceeded", a.Err(), context.Cause(a))
		}
		if a.leaseLapsed() {
			t.Fatal("past the deadline: leaseLapsed")
		}
	})

	t.Run("deadline, asked without waiting", func(t *testing.T) {
		a, release := r.attemptContext(holdFlight(r.fl, held(), false), time.Now(), -time.Millisecond)
		defer release()
		if err := a.Err(); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("past the deadline: Err = %v, want DeadlineExceeded", err)
		}
		b, release := r.attemptContext(holdFlight(r.fl, held(), false), time.Now(), -time.Millisecond)
		defer release()
		if c := context.Cause(transport.WithSendGuard(b, func() error { return nil })); !errors.Is(c, context.DeadlineExceeded) {
			t.Fatalf("past the deadline, a value context on it: Cause = %v, want DeadlineExceeded", c)
		}
	})

	t.Run("lease lapses, waited for", func(t *testing.T) {
		a, release := r.attemptContext(holdFlight(r.fl, time.Now().Add(20*time.Millisecond), false), time.Now(), time.Minute)
		defer release()
		waitDone(t, a, "a lease lapsing 20 ms on")
		if !errors.Is(a.Err(), context.Canceled) || !errors.Is(context.Cause(a), errLeaseLapsed) || !a.leaseLapsed() {
			t.Fatalf("after the lease lapsed: Err %v, Cause %v; want Canceled for errLeaseLapsed", a.Err(), context.Cause(a))
		}
	})

	t.Run("lease lapsed, asked without waiting", func(t *testing.T) {
		a, release := r.attemptContext(holdFlight(r.fl, time.Now().Add(-time.Millisecond), false), time.Now(), time.Minute)
		defer release()
		if !a.leaseLapsed() || !errors.Is(context.Cause(a), errLeaseLapsed) {
			t.Fatalf("a lease past its end: leaseLapsed false or Cause %v", context.Cause(a))
		}
	})

	t.Run("lease found gone, and a message not held", func(t *testing.T) {
		gone, release := r.attemptContext(holdFlight(r.fl, held(), true), time.Now(), time.Minute)
		defer release()
		if !errors.Is(gone.Err(), context.Canceled) || !gone.leaseLapsed() {
			t.Fatalf("lease found gone: Err %v, Cause %v", gone.Err(), context.Cause(gone))
		}
		a, release := r.attemptContext(holdFlight(r.fl, held(), false), time.Now(), time.Minute)
		defer release()
		other := &Relay{clk: clock.Real, fl: newFlights(), deliverCtx: parent}
		b, releaseB := other.attemptContext(a.id, time.Now(), time.Minute) // not in other's flights
		defer releaseB()
		if !b.leaseLapsed() {
			t.Fatal("a message the relay does not hold: not lapsed")
		}
	})

	t.Run("a context made from it", func(t *testing.T) {
		a, release := r.attemptContext(holdFlight(r.fl, held(), false), time.Now(), time.Minute)
		child, cancel := context.WithCancel(transport.WithSendGuard(a, func() error { return nil }))
		defer cancel()
		if child.Err() != nil {
			t.Fatalf("child ended at once: %v", child.Err())
		}
		release()
		waitDone(t, child, "a child of a released attempt")
	})

	t.Run("the relay's delivery context ends", func(t *testing.T) {
		p, stopP := context.WithCancel(context.Background())
		rr := &Relay{clk: clock.Real, fl: r.fl, deliverCtx: p}
		a, release := rr.attemptContext(holdFlight(r.fl, held(), false), time.Now(), time.Minute)
		defer release()
		b, releaseB := rr.attemptContext(holdFlight(r.fl, held(), false), time.Now(), time.Minute)
		defer releaseB()
		done := b.Done() // b waits, a does not
		stopP()
		<-done
		if !errors.Is(a.Err(), context.Canceled) || !errors.Is(b.Err(), context.Canceled) {
			t.Fatalf("after the delivery context ended: Err %v and %v, want Canceled", a.Err(), b.Err())
		}
	})

	t.Run("concurrent use", func(t *testing.T) {
		a, release := r.attemptContext(holdFlight(r.fl, held(), false), time.Now(), time.Minute)
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				if i%2 == 0 {
					<-a.Done()
				}
				_ = a.Err()
				_ = a.Value(struct{}{})
			})
		}
		release()
		wg.Wait()
		if !errors.Is(a.Err(), context.Canceled) {
			t.Fatalf("Err = %v", a.Err())
		}
	})

	t.Run("fake clock", func(t *testing.T) {
		clk := clock.NewFake(time.Now())
		f := &Relay{clk: clk, fl: r.fl, deliverCtx: parent}
		a, release := f.attemptContext(holdFlight(r.fl, time.Now().Add(-time.Hour), false), time.Now(), time.Minute)
		defer release()
		if a.Err() != nil || a.leaseLapsed() {
			t.Fatalf("on a fake clock the lease does not bound the attempt: Err %v", a.Err())
		}
		clk.Advance(time.Minute)
		waitDone(t, a, "a minute on the fake clock")
		if !errors.Is(a.Err(), context.DeadlineExceeded) {
			t.Fatalf("Err = %v, want DeadlineExceeded", a.Err())
		}
	})
}
