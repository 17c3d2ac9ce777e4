package relay

import (
	"context"
	"errors"
	"reflect"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/transport"
)

// wallShifted returns t with its wall reading moved on by d and its
// monotonic reading kept: what time.Now reads after the host (a laptop,
// a VM) was suspended for d. Linux's CLOCK_MONOTONIC, Go's monotonic
// clock, does not count the suspend; the wall clock is set again on
// resume. The time package makes no such time, so the monotonic reading
// (the unexported ext of a time that has one) is copied back; the test
// is skipped if the time package no longer reads that way.
func wallShifted(tb testing.TB, t time.Time, d time.Duration) time.Time {
	tb.Helper()
	u := t.Add(d)
	if f, ok := reflect.TypeFor[time.Time]().FieldByName("ext"); ok && f.Type.Kind() == reflect.Int64 {
		*(*int64)(unsafe.Add(unsafe.Pointer(&u), f.Offset)) = *(*int64)(unsafe.Add(unsafe.Pointer(&t), f.Offset))
	}
	if u.Sub(t) != 0 || u.Round(0).Sub(t.Round(0)) != d {
		tb.Skip("cannot make a time whose wall and monotonic readings differ")
	}
	return u
}

// suspendClock is a fake clock whose readings carry a monotonic reading,
// as the real clock's do, and whose host can be suspended: suspend moves
// the wall reading on and leaves the monotonic reading and the timers
// where they were. The fake clock moves both.
type suspendClock struct {
	*clock.Fake
	start time.Time // the fake clock's start, with a monotonic reading
	slept atomic.Int64
}

func newSuspendClock(tb testing.TB, f *clock.Fake) *suspendClock {
	now := time.Now()
	return &suspendClock{Fake: f, start: wallShifted(tb, now, f.Now().Sub(now))}
}

func (c *suspendClock) Now() time.Time {
	return c.wallOnly(c.start.Add(c.Fake.Now().Sub(c.start.Round(0))), time.Duration(c.slept.Load()))
}

// wallOnly is wallShifted for the clock's readings, which the test has
// checked can be made.
func (c *suspendClock) wallOnly(t time.Time, d time.Duration) time.Time {
	if d == 0 {
		return t
	}
	u := t.Add(d)
	f, _ := reflect.TypeFor[time.Time]().FieldByName("ext")
	*(*int64)(unsafe.Add(unsafe.Pointer(&u), f.Offset)) = *(*int64)(unsafe.Add(unsafe.Pointer(&t), f.Offset))
	return u
}

// suspend is a suspend of the host for d.
func (c *suspendClock) suspend(d time.Duration) { c.slept.Add(int64(d)) }

// TestNoDeliveryStartsAfterASuspendLongerThanTheLease: the host of a
// relay delivering one message, the other waiting for the one worker, is
// suspended for 45 s, past the 30 s lease; the database's clock runs on
// meanwhile and another instance claims both. On resume the delivery in
// progress returns and the worker takes the waiting message: the relay's
// monotonic clock did not count the suspend, and read on it the lease
// still had 30 s left. It must not start it: another instance holds it.
func TestNoDeliveryStartsAfterASuspendLongerThanTheLease(t *testing.T) {
	t.Parallel()
	storeClk := clock.NewFake(epoch)
	e := newEnv(t, withOrdering(outbox.OrderingNone), func(c *store.Config) { c.Clock = storeClk })
	clk := newSuspendClock(t, e.clk)
	first, second := msg("orders", "a", 1), msg("orders", "b", 2)
	e.enqueue(first, second)
	rec, started, proceed := firstHangs()
	cfg := e.config(map[string]Destination{"orders": {Transport: rec.transport(), Timeout: time.Hour}})
	cfg.Clock, cfg.Workers = clk, 1
	rn := e.start(cfg)
	<-started
	rn.waitFor("both messages claimed", func() bool { return rn.r.Stats().InFlight == 2 })
	waiting := second
	if rec.got()[0] == string(second.Payload) {
		waiting = first
	}

	clk.suspend(45 * time.Second)
	storeClk.Advance(45 * time.Second)
	res, err := e.s.ProcessBatch(e.ctx, &store.Batch{Instance: store.Instance{ID: "thief"}, Claim: store.ClaimRequest{Limit: 10}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Claimed) != 2 {
		t.Fatalf("the other instance claimed %d messages, want both", len(res.Claimed))
	}
	close(proceed) // resumed
	rn.waitFor("the message given back", func() bool { return rn.r.Stats().InFlight == 0 })

	if n := rec.count(string(waiting.Payload)); n != 0 {
		t.Fatalf("the message another instance holds was delivered %d times here after the suspend", n)
	}
	if got := e.get(waiting.ID); got == nil || got.InstanceID != "thief" {
		t.Fatalf("the other instance's message = %+v", got)
	}
}

// TestLeaseChecksCountASuspend: a suspend of the relay's host as long as
// the rest of the lease ends it for a delivery that has not started, for
// one whose transport asks before it sends (transport.CheckSend) and for
// a delivery's lease bound, though the monotonic clock did not move.
func TestLeaseChecksCountASuspend(t *testing.T) {
	now := time.Now()
	resumed := wallShifted(t, now, time.Minute)
	fl := newFlights()
	id := holdFlight(fl, now.Add(30*time.Second), false)
	if !fl.holds(id, now, time.Second) {
		t.Fatal("a lease with 30 s left is not held")
	}
	if fl.holds(id, resumed, 0) || fl.startable(id, resumed, time.Second) {
		t.Fatal("a lease with 30 s left is held after a suspend of a minute")
	}

	clk := clock.NewFake(now)
	sc := &suspendClock{Fake: clk, start: now}
	r := &Relay{clk: sc, fl: newFlights()}
	guarded := transport.WithSendGuard(context.Background(), r.sendGuard(holdFlight(r.fl, sc.Now().Add(30*time.Second), false)))
	if err := transport.CheckSend(guarded); err != nil {
		t.Fatalf("before the suspend: CheckSend = %v", err)
	}
	sc.suspend(time.Minute)
	if err := transport.CheckSend(guarded); !errors.Is(err, errLeaseLapsed) {
		t.Fatalf("after a suspend of a minute: CheckSend = %v, want errLeaseLapsed", err)
	}

	// The lease bound's timer runs on the monotonic clock: a lease whose
	// wall-clock end has passed is over at once.
	rr := &Relay{clk: clock.Real, fl: newFlights()}
	ctx, unbind := rr.leaseBound(context.Background(), holdFlight(rr.fl, wallShifted(t, time.Now().Add(time.Hour), -2*time.Hour), false))
	defer unbind()
	if !errors.Is(context.Cause(ctx), errLeaseLapsed) {
		t.Fatalf("a lease an hour ahead on the monotonic clock and an hour past on the wall clock: context %v, cause %v; want cancelled for the lease",
			ctx.Err(), context.Cause(ctx))
	}
}

// TestSuspendIsAStall: a suspend of the relay's host is a stall of the
// relay, though the monotonic clock, on which the watchdog's timer runs,
// did not count it: a delivery that failed across it (its connection
// closed by the receiver meanwhile) is not blamed on its destination.
func TestSuspendIsAStall(t *testing.T) {
	last := time.Now()
	now := wallShifted(t, last.Add(stallTick), time.Minute) // a tick on time, a minute late on the wall clock
	if gap := stallGap(last, now); gap <= stallTick+stallThreshold {
		t.Fatalf("a suspend of a minute between two ticks: gap %v, want a stall (over %v)", gap, stallTick+stallThreshold)
	}
	var s stalls
	s.add(last, now)
	if start, end := last.Add(-time.Second), now.Add(time.Second); !s.overlaps(start, end) {
		t.Fatal("a delivery across the suspend does not overlap its stall")
	}
	if gap := stallGap(last, last.Add(stallTick)); gap != stallTick {
		t.Fatalf("a tick on time on both clocks: gap %v, want %v", gap, stallTick)
	}
}
