package workflow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/workflow/wfstore"
)

// whileHeld makes op, a store call of the driver, and makes it again while
// it fails for want of the database (store.ErrUnavailable: a killed
// connection, a restart, a failover) and the run's lease is sure to hold:
// as the renewals do (renewWhileHeld), until two thirds of the lease held
// at the first failure have gone, or the keeper gave the lease up. The
// driver then stops, leaving the run to its lease (or releasing it, if
// the database answers that). The tries are spaced from a thirtieth of
// Config.LeaseDuration, doubling. It
// returns op's last error and whether an earlier try failed so: that
// try's outcome is then unknown (the database may have committed it
// before the connection went), and a fenced write the store now refuses
// (ErrConflict) may be the driver's own, already recorded. Callers of such
// writes read the run again to tell (startAttempt, record, finish).
//
// A database away for a moment stopped the run at the first such call:
// its running attempts were cancelled and recorded lost, and the run was
// released until a resume, though nobody else could take it.
func (dr *driver) whileHeld(ctx context.Context, op func(ctx context.Context) error) (retried bool, err error) {
	clk, ttl := dr.e.cfg.Clock, dr.e.cfg.LeaseDuration
	step := max(ttl/30, time.Millisecond)
	var giveUp time.Time
	for {
		err = op(ctx)
		if err == nil || !errors.Is(err, store.ErrUnavailable) || ctx.Err() != nil {
			return retried, err
		}
		if giveUp.IsZero() {
			giveUp = dr.lease.heldAt().Add(2 * ttl / 3)
		}
		now := clk.Now()
		if !now.Before(giveUp) || dr.lease.err() != nil {
			return retried, err
		}
		next := now.Add(step)
		if next.After(giveUp) {
			next = giveUp
		}
		step *= 2
		retried = true
		dr.e.log.LogAttrs(ctx, slog.LevelInfo, retryingMsg, slog.String("run_id", dr.runID),
			slog.String("error", err.Error()), slog.Duration("retry_in", next.Sub(now)))
		if !dr.sleepHeld(ctx, next) {
			return retried, err
		}
	}
}

// acquire takes the run's lease (AcquireRun) and returns it, trying again
// while the database is unavailable as whileHeld does for the driver's
// calls: for two thirds of a lease from the first failure, the tries
// spaced from a thirtieth of Config.LeaseDuration, doubling. A database
// away for a moment failed Run right after it created the run (held by
// this instance, so nobody else could take it until its lease lapsed) and
// failed a resume. Trying again after a try that committed is harmless:
// the owner takes its own run again.
func (e *Engine) acquire(ctx context.Context, runID string) (wfstore.Lease, error) {
	clk, ttl := e.cfg.Clock, e.cfg.LeaseDuration
	step := max(ttl/30, time.Millisecond)
	var giveUp time.Time
	for {
		l := e.lease()
		err := e.st.AcquireRun(ctx, runID, l)
		if err == nil || !errors.Is(err, store.ErrUnavailable) || ctx.Err() != nil {
			return l, err
		}
		if giveUp.IsZero() {
			giveUp = l.Now.Add(2 * ttl / 3)
		}
		if !l.Now.Before(giveUp) {
			return l, err
		}
		next := min(step, giveUp.Sub(l.Now))
		step *= 2
		e.log.LogAttrs(ctx, slog.LevelInfo, retryingMsg, slog.String("run_id", runID),
			slog.String("error", err.Error()), slog.Duration("retry_in", next))
		t := clk.NewTimer(next)
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return l, err
		}
	}
}

// retryingMsg is logged (INFO) before each wait of whileHeld.
const retryingMsg = "store call failed for want of the database; trying it again while the run's lease holds"

// sleepHeld waits on the engine's clock until t and reports whether t
// came; it returns false at once when ctx ends or the lease is given up.
func (dr *driver) sleepHeld(ctx context.Context, t time.Time) bool {
	clk := dr.e.cfg.Clock
	timer := clk.NewTimer(t.Sub(clk.Now()))
	defer timer.Stop()
	fired := timer.C()
	if !clk.Now().Before(t) {
		// The clock passed t while the timer was made, which may then be
		// set for later: do not wait for it.
		now := make(chan time.Time, 1)
		now <- t
		fired = now
	}
	select {
	case <-fired:
		return true
	case <-ctx.Done():
		return false
	case <-dr.lease.lost:
		return false
	}
}

// read returns the run as stored, without touching what the driver
// knows of it (load), tried again while the database is unavailable.
func (dr *driver) read(ctx context.Context) (*wfstore.Snapshot, error) {
	var snap *wfstore.Snapshot
	_, err := dr.whileHeld(ctx, func(ctx context.Context) (err error) {
		snap, err = dr.e.st.Load(ctx, dr.runID)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("workflow: run %s: %w", dr.runID, err)
	}
	return snap, nil
}

// recorded returns which of fs, the outcomes the driver tried to record
// for one attempt, the store holds (the same outcome and error), or nil:
// after a write whose outcome was unknown, it tells whether that write
// was recorded, and not another instance's (a lost attempt it settled).
func (dr *driver) recorded(ctx context.Context, fs ...*wfstore.Finish) (*wfstore.Finish, error) {
	snap, err := dr.read(ctx)
	if err != nil {
		return nil, err
	}
	for _, a := range snap.Attempts {
		if a.TaskID != fs[0].TaskID || a.Number != fs[0].Attempt {
			continue
		}
		for _, f := range fs {
			if a.Outcome == f.Outcome && a.Error == f.Error {
				return f, nil
			}
		}
	}
	return nil, nil
}
