package relay

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/clock"
)

// errLeaseLapsed is the cause of a delivery's context cancelled because
// the relay no longer held the message's lease.
var errLeaseLapsed = errors.New("the relay no longer holds the message's lease")

// leaseBound returns ctx cancelled, with cause errLeaseLapsed, once the
// relay no longer holds the lease of message id: its lease passed the time
// the relay knows it until (renewals move it on) or a renewal found it
// gone. A delivery checks the lease before it starts (flights.startable);
// a process stopped after that check (SIGSTOP, a VM paused) and continued
// after the lease lapsed went on to write its request, after another
// instance had delivered the message and a later one of its stream (a
// stale re-send, seen once in the chaos suite). The timer is overdue when
// the process is continued, so the request is dropped unless it was being
// written already. Only on the wall clock: a test's fake clock moves in
// steps on purpose, as for the stall detector.
func (r *Relay) leaseBound(ctx context.Context, id uuid.UUID) (context.Context, context.CancelFunc) {
	if r.clk != clock.Real {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	// A timer whose function runs only when it fires (time.AfterFunc),
	// not a goroutine a delivery waiting on a timer: those took about a
	// sixth of the process's CPU samples in a drain with a no-op handler.
	var t *time.Timer
	check := func() {
		if ctx.Err() != nil { // the delivery returned
			return
		}
		until, ok := r.fl.leaseEnd(id)
		wait := leaseLeft(time.Now(), until)
		if !ok || wait <= 0 {
			cancel(errLeaseLapsed)
			return
		}
		t.Reset(wait) // set, or renewed meanwhile
	}
	// Made first and set by check after, so that check never sees t
	// unassigned.
	t = time.AfterFunc(time.Duration(math.MaxInt64), check)
	check()
	return ctx, func() {
		cancel(context.Canceled)
		t.Stop()
	}
}

// sendGuard is the guard of message id's delivery (transport.WithSendGuard):
// it fails with errLeaseLapsed once the relay no longer holds the lease,
// asked on the relay's clock when the transport is about to send.
func (r *Relay) sendGuard(id uuid.UUID) func() error {
	return func() error {
		if !r.fl.holds(id, r.clk.Now(), 0) {
			return errLeaseLapsed
		}
		return nil
	}
}
