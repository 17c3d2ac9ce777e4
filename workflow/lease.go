package workflow

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/store"
)

// keeper renews a run's lease from a goroutine of its own, every third of
// Config.LeaseDuration, for as long as a driver holds the run.
//
// The lease must stay held whatever the driver's goroutine is doing, and
// that includes user code that can be slow: OnTaskFailure, the
// dead-letter manager's alert callbacks (OnEntryAdded,
// OnThresholdReached), the OnCommit functions that run inside the
// transaction recording a success, and store calls. Renewed only between
// those, the lease lapsed during a slow one, another instance took the run
// over and ran a still-running task a second time at once.
type keeper struct {
	// renewed receives a value after each renewal (dropped when one is
	// waiting), so that the driver reads the run again as often.
	renewed chan struct{}
	// lost is closed when a renewal failed; cause is then set.
	lost  chan struct{}
	cause error
	// held is when the lease was last taken or renewed, in Unix
	// nanoseconds of the engine's clock: the lease holds until a
	// LeaseDuration after it.
	held atomic.Int64
	// stop ends the renewals and waits for the goroutine to return.
	stop func()
}

// err returns why the lease could not be renewed, nil while it is held.
func (k *keeper) err() error {
	select {
	case <-k.lost:
		return k.cause
	default:
		return nil
	}
}

// heldAt returns when the lease was last taken or renewed.
func (k *keeper) heldAt() time.Time { return time.Unix(0, k.held.Load()) }

// keepLease starts renewing the run's lease, taken at taken. A renewal
// the database does not answer is tried again while the lease surely
// holds (renewWhileHeld). A renewal that fails for good stops the driver as a lost lease does: the running attempts
// are cancelled (runCtx) with the renewal's error, and the loop, which
// watches lost, aborts on it. The renewals go on after the caller's
// context ends, while the driver records the interrupted attempts, until
// stop: the run is held until it is released or ended.
func (dr *driver) keepLease(taken time.Time) *keeper {
	k := &keeper{renewed: make(chan struct{}, 1), lost: make(chan struct{})}
	k.held.Store(taken.UnixNano())
	done, stopped := make(chan struct{}), make(chan struct{})
	var once sync.Once
	k.stop = func() {
		once.Do(func() { close(done) })
		<-stopped
	}
	go func() {
		defer close(stopped)
		last := taken
		for sleepUntil(dr.e.cfg.Clock, last.Add(dr.e.cfg.LeaseDuration/3), done) {
			now, err := dr.renewWhileHeld(last, done)
			if errors.Is(err, errStopped) {
				return
			}
			if err != nil {
				k.cause = err
				close(k.lost)
				dr.cancel(err)
				return
			}
			last = now
			k.held.Store(now.UnixNano())
			select {
			case k.renewed <- struct{}{}:
			default:
			}
		}
	}()
	return k
}

// errStopped is renewWhileHeld's error when the keeper was stopped.
var errStopped = errors.New("workflow: lease keeper stopped")

// renewWhileHeld renews the lease last renewed (or taken) at last. A
// renewal that fails for want of the database (a killed connection, a
// restart, a failover: store.ErrUnavailable) is tried again every
// thirtieth of LeaseDuration while the lease is sure to hold, until two
// thirds of it have gone, leaving the last third as a margin for the
// clocks. A database away for a moment stopped the driver at its first
// renewal, cancelling the running attempts, though nobody else could take
// the run for two thirds of a lease.
func (dr *driver) renewWhileHeld(last time.Time, done <-chan struct{}) (time.Time, error) {
	clk, ttl := dr.e.cfg.Clock, dr.e.cfg.LeaseDuration
	giveUp := last.Add(2 * ttl / 3)
	for {
		now, err := dr.renew()
		if err == nil || !errors.Is(err, store.ErrUnavailable) || !clk.Now().Before(giveUp) {
			return now, err
		}
		next := clk.Now().Add(max(ttl/30, time.Millisecond))
		if next.After(giveUp) {
			next = giveUp
		}
		if !sleepUntil(clk, next, done) {
			return time.Time{}, errStopped
		}
	}
}

// renew extends the run's lease from now and returns now. Renewing
// succeeds as long as no other instance took the run over, even if the
// lease lapsed meanwhile.
func (dr *driver) renew() (time.Time, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(dr.ctx), writeTimeout)
	defer cancel()
	l := dr.e.lease()
	if err := dr.e.st.RenewRun(ctx, dr.runID, l); err != nil {
		return time.Time{}, fmt.Errorf("workflow: run %s: %w", dr.runID, err)
	}
	return l.Now, nil
}

// sleepUntil waits on c until t, or until done is closed, and reports
// whether t came first.
func sleepUntil(c clock.Clock, t time.Time, done <-chan struct{}) bool {
	select {
	case <-done:
		return false
	default:
	}
	if !c.Now().Before(t) {
		return true
	}
	timer := c.NewTimer(t.Sub(c.Now()))
	defer timer.Stop()
	fired := timer.C()
	if !c.Now().Before(t) {
		// The clock passed t while the timer was made, which may then be
		// set for later: do not wait for it.
		now := make(chan time.Time, 1)
		now <- t
		fired = now
	}
	select {
	case <-fired:
		select {
		case <-done:
			return false
		default:
			return true
		}
	case <-done:
		return false
	}
}
