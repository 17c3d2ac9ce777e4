package workflow

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/backstophq/backstop/clock"
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

// keepLease starts renewing the run's lease, taken at taken. A renewal
// that fails stops the driver as a lost lease does: the running attempts
// are cancelled (runCtx) with the renewal's error, and the loop, which
// watches lost, aborts on it. The renewals go on after the caller's
// context ends, while the driver records the interrupted attempts, until
// stop: the run is held until it is released or ended.
func (dr *driver) keepLease(taken time.Time) *keeper {
	k := &keeper{renewed: make(chan struct{}, 1), lost: make(chan struct{})}
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
			now, err := dr.renew()
			if err != nil {
				k.cause = err
				close(k.lost)
				dr.cancel(err)
				return
			}
			last = now
			select {
			case k.renewed <- struct{}{}:
			default:
			}
		}
	}()
	return k
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
