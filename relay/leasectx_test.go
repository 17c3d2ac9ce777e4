package relay

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/transport"
)

// holdFlight puts a message in flight on fl, its lease known until until
// (or lost), and returns its id.
func holdFlight(fl *flights, until time.Time, lost bool) uuid.UUID {
	m := &outbox.Message{ID: uuid.New()}
	fl.mu.Lock()
	fl.add(&flight{m: m, until: until, lost: lost})
	fl.mu.Unlock()
	return m.ID
}

// TestLeaseBoundCancelsWhenTheLeaseLapses: on the wall clock a delivery's
// context ends, with cause errLeaseLapsed, once the relay's lease on the
// message has lapsed, and at once for a message whose lease was found
// gone; its release (the delivery returned) ends it with another cause.
func TestLeaseBoundCancelsWhenTheLeaseLapses(t *testing.T) {
	r := &Relay{clk: clock.Real, fl: newFlights()}
	hold := func(until time.Time, lost bool) uuid.UUID { return holdFlight(r.fl, until, lost) }
	lapsed := func(ctx context.Context) bool {
		select {
		case <-ctx.Done():
			return errors.Is(context.Cause(ctx), errLeaseLapsed)
		case <-time.After(10 * time.Second):
			return false
		}
	}
	ctx, unbind := r.leaseBound(context.Background(), hold(time.Now().Add(30*time.Millisecond), false))
	defer unbind()
	if !lapsed(ctx) {
		t.Fatalf("a lease that lapsed 30 ms on: context %v, cause %v; want cancelled for the lease", ctx.Err(), context.Cause(ctx))
	}
	ctx, unbind = r.leaseBound(context.Background(), hold(time.Now().Add(time.Hour), true))
	defer unbind()
	if !lapsed(ctx) {
		t.Fatalf("a lease found gone: context %v, cause %v; want cancelled for the lease", ctx.Err(), context.Cause(ctx))
	}
	ctx, unbind = r.leaseBound(context.Background(), hold(time.Now().Add(time.Hour), false))
	if ctx.Err() != nil {
		t.Fatalf("a lease held an hour more: context %v at once", context.Cause(ctx))
	}
	unbind()
	if errors.Is(context.Cause(ctx), errLeaseLapsed) || ctx.Err() == nil {
		t.Fatalf("after the delivery returned: context %v, cause %v; want cancelled, not for the lease", ctx.Err(), context.Cause(ctx))
	}
	// on a fake clock the context is the delivery's own
	f := &Relay{clk: clock.NewFake(time.Now()), fl: r.fl}
	parent := context.Background()
	if got, _ := f.leaseBound(parent, hold(time.Now(), true)); got != parent {
		t.Fatal("on a fake clock leaseBound made a context of its own")
	}
}

// TestSendGuardFailsOnceTheLeaseLapsed: the guard a delivery's transport
// asks before it sends (transport.CheckSend) passes while the relay holds
// the lease and fails with errLeaseLapsed, matching transport.ErrNotSent,
// once it lapsed or was found gone: a process continued after a stop past
// its lease asks it after the stop, on the clock's time.
func TestSendGuardFailsOnceTheLeaseLapsed(t *testing.T) {
	clk := clock.NewFake(time.Now())
	r := &Relay{clk: clk, fl: newFlights()}
	hold := func(until time.Time, lost bool) uuid.UUID { return holdFlight(r.fl, until, lost) }
	held := transport.WithSendGuard(context.Background(), r.sendGuard(hold(clk.Now().Add(time.Minute), false)))
	gone := transport.WithSendGuard(context.Background(), r.sendGuard(hold(clk.Now().Add(time.Hour), true)))
	unknown := transport.WithSendGuard(context.Background(), r.sendGuard(uuid.New()))
	if err := transport.CheckSend(held); err != nil {
		t.Fatalf("a lease held a minute more: CheckSend = %v", err)
	}
	for name, ctx := range map[string]context.Context{"found gone": gone, "not held": unknown} {
		if err := transport.CheckSend(ctx); !errors.Is(err, errLeaseLapsed) || !errors.Is(err, transport.ErrNotSent) {
			t.Errorf("a lease %s: CheckSend = %v, want errLeaseLapsed and transport.ErrNotSent", name, err)
		}
	}
	clk.Advance(time.Minute) // a stop as long as the rest of the lease
	if err := transport.CheckSend(held); !errors.Is(err, errLeaseLapsed) || !errors.Is(err, transport.ErrNotSent) {
		t.Errorf("after the lease lapsed: CheckSend = %v, want errLeaseLapsed and transport.ErrNotSent", err)
	}
}
