package workflow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/backstophq/backstop/internal/usercode"
	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfstore"
)

// finish ends the run as the plan says and calls OnDAGFailure when it
// failed.
func (dr *driver) finish(p plan) (*Run, error) {
	dr.release()
	dr.lease.stop()
	var ended bool
	retried, err := dr.whileHeld(dr.ctx, func(ctx context.Context) (err error) {
		ended, err = dr.e.st.EndRun(ctx, dr.runID, dr.e.lease(), p.state, p.reason)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("workflow: run %s: %w", dr.runID, err)
	}
	// From here the run may have ended: what follows (reading it again,
	// OnDAGFailure) is done even if the caller's context ends now. Read
	// with that context, a shutdown just after the end failed the read,
	// OnDAGFailure was never called (nobody drives an ended run again),
	// and Run said the run was interrupted.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(dr.ctx), writeTimeout)
	defer cancel()
	if err := dr.loadWith(ctx); err != nil {
		return nil, err
	}
	if !ended && retried && dr.snap.Run.State == p.state && dr.snap.Run.Reason == p.reason {
		// A try whose outcome was unknown ended the run: the later one
		// found it ended. OnDAGFailure was not called.
		ended = true
	}
	r, runErr := dr.e.report(dr.d, dr.snap)
	if !ended {
		return r, runErr
	}
	level := slog.LevelInfo
	if p.state == models.RunStateFailed {
		level = slog.LevelWarn
	}
	dr.e.log.LogAttrs(ctx, level, "run ended", slog.String("run_id", dr.runID), slog.String("dag_id", dr.d.id),
		slog.String("state", string(p.state)), slog.String("reason", p.reason))
	dr.e.emit(Event{Time: r.EndedAt, RunID: dr.runID, DAGID: dr.d.id, RunState: p.state, Reason: p.reason})
	if cb := dr.d.prop.OnDAGFailure; cb != nil && p.state == models.RunStateFailed {
		run := &models.DAGRun{ID: r.ID, DAGID: r.DAGID, State: r.State, StartedAt: r.CreatedAt, EndedAt: r.EndedAt}
		dr.e.callback(ctx, "OnDAGFailure", func() error { return cb(ctx, run, runErr) },
			slog.String("run_id", dr.runID), slog.String("dag_id", dr.d.id))
	}
	return r, runErr
}

// abandonGrace is how long, on the engine's clock, abort waits for the
// cancelled attempts to return. A task function that ignores its context
// is abandoned after it: Run, Resume and Work's shutdown returned only when
// it did, which may be never.
const abandonGrace = 5 * time.Second

// abort stops the driver on err: running attempts are cancelled, their
// outcomes recorded (an interrupted one is not a failure), and the run is
// released for another instance unless the lease was lost. Attempts that
// do not return within abandonGrace are abandoned, logged at WARN: their
// rows stay running, and the run is not released but left to its lease,
// which lapses (it is no longer renewed); whoever takes the run then
// finds them lost and runs them again. This engine does not take it
// before they have returned (awaitAbandoned).
func (dr *driver) abort(err error) (*Run, error) {
	dr.cancel(err)
	bg, cancel := context.WithTimeout(context.WithoutCancel(dr.ctx), writeTimeout)
	defer cancel()
	grace := dr.e.cfg.Clock.NewTimer(abandonGrace)
	defer grace.Stop()
	abandoned := false
	for len(dr.running) > 0 && !abandoned {
		select {
		case r := <-dr.results:
			if rerr := dr.record(bg, r); rerr != nil {
				err = errors.Join(err, rerr)
			}
		case <-grace.C():
			abandoned = true
			dr.e.awaitAbandoned(dr.runID, len(dr.running), dr.results)
			for id, f := range dr.running {
				dr.e.log.LogAttrs(bg, slog.LevelWarn, "attempt abandoned: the task did not return after its context was cancelled; it may ignore its context",
					slog.String("run_id", dr.runID), slog.String("dag_id", dr.d.id), slog.String("task_id", id),
					slog.Int("attempt", f.attempt), slog.Duration("grace", abandonGrace))
			}
		}
	}
	dr.release()
	dr.lease.stop()
	if !abandoned && !errors.Is(err, wfstore.ErrLeaseLost) {
		if rerr := dr.e.st.ReleaseRun(bg, dr.runID, dr.e.lease()); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}
	dr.e.log.LogAttrs(bg, slog.LevelWarn, "run interrupted", slog.String("run_id", dr.runID),
		slog.String("dag_id", dr.d.id), slog.String("error", err.Error()))
	return nil, err
}

// release gives back a token won in wait and not used.
func (dr *driver) release() {
	if dr.slot {
		dr.slot = false
		<-dr.e.sem
	}
}

// callback runs the user's callback name (OnTaskFailure, OnDAGFailure)
// and logs its error at WARN. A callback that panics (an alert with a nil
// client) or calls runtime.Goexit is logged at ERROR (usercode.Run) and taken as
// failed: it must not take the process or the driver down, and with them
// every run they drive. OnTaskFailure's panic crashed the process again on
// every resume, when the failure was dead-lettered again, so the run could
// never end.
func (e *Engine) callback(ctx context.Context, name string, fn func() error, attrs ...slog.Attr) {
	var err error
	if usercode.Run(ctx, e.log, name, "", func() { err = fn() }, attrs...) && err != nil {
		e.log.LogAttrs(ctx, slog.LevelWarn, name+" failed", append(attrs, slog.String("error", err.Error()))...)
	}
}
