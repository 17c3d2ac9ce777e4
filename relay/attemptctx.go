package relay

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/clock"
)

// attemptCtx is the context of one delivery attempt on the wall clock: it
// ends when the relay's delivery context does, at the destination's
// timeout (context.DeadlineExceeded), and once the relay no longer holds
// the message's lease (context.Canceled, cause errLeaseLapsed; see
// leaseBound). It is what leaseBound under withTimeout would be, made
// only when something waits for it: the first call of Done arms it (the
// two contexts, their timers and their link to the parent are made then),
// and Err arms it only once it has ended. A handler that returns without
// waiting on its context, an in-process handler above all, costs no timer
// and no context: the two contexts with their timers made for every
// attempt took a quarter of the relay's CPU samples in a drain with a
// no-op handler, most of it on the lock of the delivery context that every
// attempt registered with (docs/benchmarks.md).
//
// Value arms it as well once it has ended, so that context.Cause, which
// finds the cancelled context through Value, sees its cause.
type attemptCtx struct {
	r        *Relay
	id       uuid.UUID
	parent   context.Context
	deadline time.Time // the destination's timeout, from the attempt's start
	// until is the lease's end as the relay knew it when the attempt
	// started: before it, and before deadline, the attempt's context is
	// taken to have not ended unless its parent has or it was released.
	// That is when leaseBound's timer, set at the start, would first have
	// looked: a lease found gone meanwhile (flight.lost), or whose end the
	// relay moved earlier (flights.bound), ends the context at until, as
	// it ended leaseBound's then.
	until time.Time

	released atomic.Bool
	armed    atomic.Pointer[armedCtx]
	mu       sync.Mutex // serialises arming
}

// armedCtx is an attemptCtx's contexts once made.
type armedCtx struct {
	leased context.Context // leaseBound's
	ctx    context.Context // leased, with the attempt's deadline
	cancel func()
}

// attemptContext returns the context of an attempt to deliver message id,
// started at start on the relay's clock, that may last timeout, and its
// release. On a clock other than the wall clock (a test's fake clock) it
// is withTimeout on that clock, and the lease does not bound it, as with
// leaseBound.
func (r *Relay) attemptContext(id uuid.UUID, start time.Time, timeout time.Duration) (*attemptCtx, func()) {
	a := &attemptCtx{r: r, id: id, parent: r.deliverCtx}
	if r.clk != clock.Real {
		ctx, cancel := withTimeout(a.parent, r.clk, timeout)
		a.armed.Store(&armedCtx{leased: a.parent, ctx: ctx, cancel: cancel})
		return a, cancel
	}
	a.deadline = start.Add(timeout)
	until, ok := r.fl.leaseEnd(id)
	a.until = until
	if !ok {
		a.arm() // not held: leaseBound ends it at once
	}
	return a, a.release
}

// arm makes a's contexts, once, and returns them.
func (a *attemptCtx) arm() *armedCtx {
	if ac := a.armed.Load(); ac != nil {
		return ac
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if ac := a.armed.Load(); ac != nil {
		return ac
	}
	var ac *armedCtx
	if a.released.Load() {
		// Released before anything ended it (release arms it first
		// otherwise): it ended then, with context.Canceled, whatever
		// happened since (the deadline passed, the flight ended).
		ctx, cancel := context.WithCancel(context.WithoutCancel(a.parent))
		cancel()
		ac = &armedCtx{leased: ctx, ctx: ctx, cancel: cancel}
	} else {
		leased, unbind := a.r.leaseBound(a.parent, a.id)
		outer := leased
		if a.deadlineWon() {
			// Past the deadline while the lease was held and before the
			// deliveries were cancelled: the lease's lapse or the
			// cancellation since is leased's alone, as leaseBound's under
			// withTimeout was.
			outer = context.WithoutCancel(leased)
		}
		ctx, cancel := context.WithDeadline(outer, a.deadline)
		ac = &armedCtx{leased: leased, ctx: ctx, cancel: func() { cancel(); unbind() }}
		if a.released.Load() {
			ac.cancel()
		}
	}
	a.armed.Store(ac)
	return ac
}

// deadlineWon reports whether a ended at its deadline rather than with its
// parent: past the deadline (deadlineFirst) while the parent was not done,
// or done only after the deadline, when the relay noted when it cancelled
// its deliveries. A handler that ignored its context past the deadline
// and was asked only once shutdown had cancelled the deliveries timed
// out, as it would have with the two contexts made at its start; it is
// not a delivery shutdown cut short (decide releases those uncharged).
func (a *attemptCtx) deadlineWon() bool {
	if a.parent.Err() != nil {
		at := a.r.deliveriesEnded.Load()
		if at == nil || !at.After(a.deadline) {
			return false
		}
	}
	return a.deadlineFirst()
}

// deadlineFirst reports whether a is past its deadline and the relay held
// the lease at the deadline: its lease end, renewed or, if the lease was
// found gone, as known at the start (leaseBound's timer looked no sooner),
// is after the deadline.
func (a *attemptCtx) deadlineFirst() bool {
	if time.Now().Before(a.deadline) {
		return false
	}
	until := a.until
	if u, ok := a.r.fl.leaseEnd(a.id); ok {
		until = u
	}
	return leaseLeft(a.deadline, until) > 0
}

// release ends the attempt's context: the delivery returned.
func (a *attemptCtx) release() {
	if a.armed.Load() == nil && a.ended() {
		a.arm() // ended before: keep how
	}
	a.released.Store(true)
	a.mu.Lock()
	ac := a.armed.Load()
	a.mu.Unlock()
	if ac != nil {
		ac.cancel()
	}
}

// ended reports whether a, not armed, has ended by now: released, its
// parent done, past its deadline, or past the lease as the relay knew it
// at the start (leaseLeft: on both of the clock's readings).
func (a *attemptCtx) ended() bool {
	if a.released.Load() || a.parent.Err() != nil {
		return true
	}
	now := time.Now()
	return !now.Before(a.deadline) || leaseLeft(now, a.until) <= 0
}

// Deadline is the destination's timeout from the attempt's start, on the
// wall clock whether armed or not (the relay's delivery context has no
// deadline); on a fake clock, withTimeout's.
func (a *attemptCtx) Deadline() (time.Time, bool) {
	if a.deadline.IsZero() {
		return a.armed.Load().ctx.Deadline()
	}
	return a.deadline, true
}

func (a *attemptCtx) Done() <-chan struct{} { return a.arm().ctx.Done() }

func (a *attemptCtx) Err() error {
	if ac := a.armed.Load(); ac != nil {
		return ac.ctx.Err()
	}
	if a.ended() {
		return a.arm().ctx.Err()
	}
	return nil
}

func (a *attemptCtx) Value(key any) any {
	if ac := a.armed.Load(); ac != nil {
		return ac.ctx.Value(key)
	}
	if a.ended() {
		return a.arm().ctx.Value(key)
	}
	return a.parent.Value(key)
}

func (a *attemptCtx) String() string { return "relay.attemptContext(" + a.id.String() + ")" }

// leaseLapsed reports whether a ended because the relay no longer held
// the lease.
func (a *attemptCtx) leaseLapsed() bool {
	ac := a.armed.Load()
	if ac == nil && a.ended() {
		ac = a.arm()
	}
	return ac != nil && errors.Is(context.Cause(ac.leased), errLeaseLapsed)
}
