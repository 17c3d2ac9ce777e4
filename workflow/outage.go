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
	return dr.e.whileUnavailable(ctx, dr.runID,
		func() time.Time { return dr.lease.heldAt().Add(2 * dr.e.cfg.LeaseDuration / 3) },
		func() bool { return dr.lease.err() == nil }, dr.lease.lost, op)
}

// acquire takes the run's lease (AcquireRun) and returns it, trying again
// while the database is unavailable as whileHeld does for the driver's
// calls, for two thirds of a lease from the first failure. A database
// away for a moment failed Run right after it created the run (held by
// this instance, so nobody else could take it until its lease lapsed) and
// failed a resume. Trying again after a try that committed is harmless:
// the owner takes its own run again.
func (e *Engine) acquire(ctx context.Context, runID string) (l wfstore.Lease, err error) {
	_, err = e.whileUnavailable(ctx, runID,
		func() time.Time { return e.cfg.Clock.Now().Add(2 * e.cfg.LeaseDuration / 3) },
		nil, nil, func(ctx context.Context) error {
			l = e.lease()
			return e.st.AcquireRun(ctx, runID, l)
		})
	return l, err
}

// whileUnavailable makes op, and makes it again while it fails for want
// of the database (store.ErrUnavailable), ctx lasts and holds (when not
// nil) says so, until giveUp, asked at the first such failure. The tries
// are spaced from a thirtieth of Config.LeaseDuration, doubling, each
// wait logged (retryingMsg) and cut short by ctx or stop (nil: never). It returns op's
// last error and whether an earlier try failed so.
func (e *Engine) whileUnavailable(ctx context.Context, runID string, giveUp func() time.Time, holds func() bool,
	stop <-chan struct{}, op func(ctx context.Context) error) (retried bool, err error) {
	clk := e.cfg.Clock
	step := max(e.cfg.LeaseDuration/30, time.Millisecond)
	var until time.Time
	var done <-chan struct{}
	for {
		err = op(ctx)
		if err == nil || !errors.Is(err, store.ErrUnavailable) || ctx.Err() != nil {
			return retried, err
		}
		if until.IsZero() {
			until = giveUp()
			// the waits end with ctx, or once stop is closed
			wait, cancel := context.WithCancel(ctx)
			defer cancel()
			if stop != nil {
				go func() {
					select {
					case <-stop:
						cancel()
					case <-wait.Done():
					}
				}()
			}
			done = wait.Done()
		}
		now := clk.Now()
		if !now.Before(until) || (holds != nil && !holds()) {
			return retried, err
		}
		next := now.Add(step)
		if next.After(until) {
			next = until
		}
		step *= 2
		retried = true
		e.log.LogAttrs(ctx, slog.LevelInfo, retryingMsg, slog.String("run_id", runID),
			slog.String("error", err.Error()), slog.Duration("retry_in", next.Sub(now)))
		if !sleepUntil(clk, next, done) {
			return retried, err
		}
	}
}

// retryingMsg is logged (INFO) before each wait of whileUnavailable.
const retryingMsg = "store call failed for want of the database; trying it again while the run's lease holds"

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

// reread returns the run as stored, read again from prev (what the
// driver holds: see wfstore.Store.Reload), or read whole when prev is nil,
// tried again while the database is unavailable.
func (dr *driver) reread(ctx context.Context, prev *wfstore.Snapshot) (*wfstore.Snapshot, error) {
	if prev == nil {
		return dr.read(ctx)
	}
	var snap *wfstore.Snapshot
	_, err := dr.whileHeld(ctx, func(ctx context.Context) (err error) {
		snap, err = dr.e.st.Reload(ctx, prev)
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
