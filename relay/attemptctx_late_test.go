package relay

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/transport"
)

// endFlight ends the flight of id, as the relay does once it has recorded
// the delivery's outcome.
func endFlight(fl *flights, id uuid.UUID) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if f := fl.m[id]; f != nil {
		fl.end(id, f)
	}
}

// setUntil moves the lease end of id as the relay knows it.
func setUntil(fl *flights, id uuid.UUID, until time.Time) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	fl.m[id].until = until
}

// reached waits for the wall clock to pass t: a context with deadline t
// ends then, a signal rather than a sleep.
func reached(t *testing.T, at time.Time) {
	t.Helper()
	ctx, cancel := context.WithDeadline(context.Background(), at)
	defer cancel()
	waitDone(t, ctx, "the wall clock to pass a time")
}

// TestAttemptContextReleasedThenAskedLate: a handler may leave a goroutine
// running that asks its context after the attempt returned. leaseBound
// under withTimeout, released, ended with context.Canceled for cause
// context.Canceled, whatever happened after: the message's flight ended
// (the relay recorded the outcome), the deadline passed. An attemptCtx
// not armed while the attempt ran must answer the same when it is armed
// afterwards, not with the state of the world at that later time.
func TestAttemptContextReleasedThenAskedLate(t *testing.T) {
	parent, stop := context.WithCancel(context.Background())
	defer stop()
	r := &Relay{clk: clock.Real, fl: newFlights(), deliverCtx: parent}
	held := time.Now().Add(time.Hour)

	for _, ask := range []struct {
		name string
		do   func(context.Context) error
	}{
		{"Err", func(ctx context.Context) error { return ctx.Err() }},
		{"Done", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }},
		{"Cause", func(ctx context.Context) error { return context.Cause(ctx) }},
		{"Cause of a value context on it", func(ctx context.Context) error {
			return context.Cause(transport.WithSendGuard(ctx, func() error { return nil }))
		}},
		{"Cause of a child", func(ctx context.Context) error {
			c, cancel := context.WithCancel(ctx)
			defer cancel()
			return context.Cause(c)
		}},
	} {
		t.Run("flight ended, "+ask.name, func(t *testing.T) {
			id := holdFlight(r.fl, held, false)
			a, release := r.attemptContext(id, time.Now(), time.Minute)
			release()
			endFlight(r.fl, id)
			if err := ask.do(a); err != context.Canceled {
				t.Fatalf("released, then the flight ended: got %v, want context.Canceled", err)
			}
			if err := a.Err(); err != context.Canceled {
				t.Fatalf("Err = %v, want context.Canceled", err)
			}
			if d, ok := a.Deadline(); !ok || d.IsZero() {
				t.Fatalf("Deadline = %v, %v after release; the standard context keeps it", d, ok)
			}
		})
		t.Run("deadline passed, "+ask.name, func(t *testing.T) {
			id := holdFlight(r.fl, held, false)
			a, release := r.attemptContext(id, time.Now(), 20*time.Millisecond)
			release()
			if !time.Now().Before(a.deadline) {
				t.Skip("released after the deadline: the test was too slow")
			}
			reached(t, a.deadline)
			if err := ask.do(a); err != context.Canceled {
				t.Fatalf("released before the deadline, asked after it: got %v, want context.Canceled", err)
			}
		})
	}
}

// TestAttemptContextDeadlineThenLeaseLapse: an attempt past its deadline
// while the lease was still held, and past the lease too by the time it is
// asked (a handler that ignores its context). leaseBound under withTimeout
// ended at the deadline with DeadlineExceeded and kept it; the lease's
// lapse is seen on leaseBound's context alone (leaseLapsed).
func TestAttemptContextDeadlineThenLeaseLapse(t *testing.T) {
	parent, stop := context.WithCancel(context.Background())
	defer stop()
	r := &Relay{clk: clock.Real, fl: newFlights(), deliverCtx: parent}
	for _, name := range []string{"Err", "Cause", "Done"} {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			id := holdFlight(r.fl, start.Add(150*time.Millisecond), false)
			a, release := r.attemptContext(id, start, 20*time.Millisecond)
			defer release()
			// The standard pair, made as attempt made them before.
			leased, unbind := r.leaseBound(parent, id)
			defer unbind()
			std, cancel := context.WithDeadline(leased, a.deadline)
			defer cancel()
			waitDone(t, std, "the standard pair at the deadline")
			want := std.Err()
			if want != context.DeadlineExceeded {
				t.Skipf("the standard pair ended with %v: its deadline timer ran after the lease's", want)
			}
			reached(t, a.until)
			waitDone(t, leased, "the standard lease context")
			var got error
			switch name {
			case "Err":
				got = a.Err()
			case "Cause":
				got = context.Cause(a)
			case "Done":
				<-a.Done()
				got = a.Err()
			}
			if got != want {
				t.Fatalf("%s = %v; the standard contexts say %v", name, got, want)
			}
			if !a.leaseLapsed() {
				t.Fatal("leaseLapsed false; the standard lease context lapsed")
			}
		})
	}
}

// TestAttemptContextManyGoroutinesAfterRelease: goroutines a handler left
// behind ask the context while and after the attempt returns; each sees
// one end, never nil after non-nil, and Done and Err agree.
func TestAttemptContextManyGoroutinesAfterRelease(t *testing.T) {
	parent, stop := context.WithCancel(context.Background())
	defer stop()
	r := &Relay{clk: clock.Real, fl: newFlights(), deliverCtx: parent}
	for range 50 {
		id := holdFlight(r.fl, time.Now().Add(time.Hour), false)
		a, release := r.attemptContext(id, time.Now(), time.Minute)
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for i := range 16 {
			wg.Go(func() {
				var seen error
				for range 50 {
					var err error
					switch i % 4 {
					case 0:
						err = a.Err()
					case 1:
						err = context.Cause(a)
					case 2:
						select {
						case <-a.Done():
							if a.Err() == nil {
								errs <- errors.New("Done closed, Err nil")
								return
							}
						default:
						}
						err = a.Err()
					case 3:
						c, cancel := context.WithCancel(a)
						err = c.Err()
						cancel()
					}
					if seen != nil && err == nil && i%4 != 3 {
						errs <- errors.New("nil after non-nil")
						return
					}
					if err != nil {
						seen = err
					}
				}
				if seen != nil && seen != context.Canceled {
					errs <- seen
				}
			})
		}
		release()
		endFlight(r.fl, id)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
}

// TestAttemptContextEndedBeforeReleaseKeepsHow: an attempt that ended
// before it was released, with nothing asking, keeps how it ended when
// asked afterwards, as the standard contexts did.
func TestAttemptContextEndedBeforeReleaseKeepsHow(t *testing.T) {
	parent, stop := context.WithCancel(context.Background())
	defer stop()
	r := &Relay{clk: clock.Real, fl: newFlights(), deliverCtx: parent}

	t.Run("deadline", func(t *testing.T) {
		id := holdFlight(r.fl, time.Now().Add(time.Hour), false)
		a, release := r.attemptContext(id, time.Now(), 20*time.Millisecond)
		reached(t, a.deadline)
		release()
		endFlight(r.fl, id)
		if err, c := a.Err(), context.Cause(a); err != context.DeadlineExceeded || c != context.DeadlineExceeded {
			t.Fatalf("Err %v, Cause %v; want DeadlineExceeded", err, c)
		}
	})
	t.Run("lease lapsed", func(t *testing.T) {
		id := holdFlight(r.fl, time.Now().Add(20*time.Millisecond), false)
		a, release := r.attemptContext(id, time.Now(), time.Hour)
		reached(t, a.until)
		release()
		endFlight(r.fl, id)
		if err, c := a.Err(), context.Cause(a); err != context.Canceled || c != errLeaseLapsed {
			t.Fatalf("Err %v, Cause %v; want Canceled for errLeaseLapsed", err, c)
		}
	})
	t.Run("lease renewed past its first end", func(t *testing.T) {
		id := holdFlight(r.fl, time.Now().Add(20*time.Millisecond), false)
		a, release := r.attemptContext(id, time.Now(), time.Hour)
		setUntil(r.fl, id, time.Now().Add(time.Hour))
		reached(t, a.until)
		if err := a.Err(); err != nil {
			t.Fatalf("renewed lease: Err %v", err)
		}
		release()
		endFlight(r.fl, id)
		if err, c := a.Err(), context.Cause(a); err != context.Canceled || c != context.Canceled {
			t.Fatalf("Err %v, Cause %v; want Canceled", err, c)
		}
	})
}

// TestAttemptContextDeadlineThenShutdown: a handler that ignores its
// context runs past its deadline, and shutdown cancels the deliveries
// before anything asked the context. The two contexts made at the
// attempt's start would have ended at the deadline, DeadlineExceeded, and
// the relay charges a timeout; cancelled deliveries (Canceled) it releases
// uncharged. Cancelled before the deadline, the attempt was cut short.
func TestAttemptContextDeadlineThenShutdown(t *testing.T) {
	t.Run("deadline first", func(t *testing.T) {
		r := &Relay{clk: clock.Real, fl: newFlights()}
		r.startDeliveries(context.Background())
		id := holdFlight(r.fl, time.Now().Add(time.Hour), false)
		a, release := r.attemptContext(id, time.Now(), 20*time.Millisecond)
		defer release()
		reached(t, a.deadline)
		r.cancelDeliveries()
		if err, c := a.Err(), context.Cause(a); err != context.DeadlineExceeded || c != context.DeadlineExceeded {
			t.Fatalf("Err %v, Cause %v; want DeadlineExceeded", err, c)
		}
		select {
		case <-a.Done():
		default:
			t.Fatal("Done not closed")
		}
	})
	t.Run("shutdown first", func(t *testing.T) {
		r := &Relay{clk: clock.Real, fl: newFlights()}
		r.startDeliveries(context.Background())
		id := holdFlight(r.fl, time.Now().Add(time.Hour), false)
		// A second, so that the cancellation just after comes first even
		// on a machine that stalls the test for a while.
		a, release := r.attemptContext(id, time.Now(), time.Second)
		defer release()
		r.cancelDeliveries()
		reached(t, a.deadline)
		if err, c := a.Err(), context.Cause(a); err != context.Canceled || c != context.Canceled {
			t.Fatalf("Err %v, Cause %v; want Canceled", err, c)
		}
	})
	t.Run("lease lapsed first, then shutdown", func(t *testing.T) {
		r := &Relay{clk: clock.Real, fl: newFlights()}
		r.startDeliveries(context.Background())
		id := holdFlight(r.fl, time.Now().Add(20*time.Millisecond), false)
		a, release := r.attemptContext(id, time.Now(), 40*time.Millisecond)
		defer release()
		reached(t, a.deadline)
		r.cancelDeliveries()
		if err := a.Err(); err != context.Canceled {
			t.Fatalf("Err %v; want Canceled (the lease lapsed before the deadline)", err)
		}
	})
}
