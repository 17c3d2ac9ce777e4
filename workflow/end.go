package workflow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfstore"
)

// finish ends the run as the plan says and calls OnDAGFailure when it
// failed.
func (dr *driver) finish(p plan) (*Run, error) {
	dr.release()
	dr.lease.stop()
	ended, err := dr.e.st.EndRun(dr.ctx, dr.runID, dr.e.lease(), p.state, p.reason)
	if err != nil {
		return nil, fmt.Errorf("workflow: run %s: %w", dr.runID, err)
	}
	if err := dr.load(); err != nil {
		return nil, err
	}
	r, runErr := dr.e.report(dr.d, dr.snap)
	if !ended {
		return r, runErr
	}
	level := slog.LevelInfo
	if p.state == models.RunStateFailed {
		level = slog.LevelWarn
	}
	dr.e.log.LogAttrs(dr.ctx, level, "run ended", slog.String("run_id", dr.runID), slog.String("dag_id", dr.d.id),
		slog.String("state", string(p.state)), slog.String("reason", p.reason))
	dr.e.emit(Event{Time: r.EndedAt, RunID: dr.runID, DAGID: dr.d.id, RunState: p.state, Reason: p.reason})
	if cb := dr.d.prop.OnDAGFailure; cb != nil && p.state == models.RunStateFailed {
		run := &models.DAGRun{ID: r.ID, DAGID: r.DAGID, State: r.State, StartedAt: r.CreatedAt, EndedAt: r.EndedAt}
		if err := cb(dr.ctx, run, runErr); err != nil {
			dr.e.log.LogAttrs(dr.ctx, slog.LevelWarn, "OnDAGFailure failed", slog.String("run_id", dr.runID),
				slog.String("dag_id", dr.d.id), slog.String("error", err.Error()))
		}
	}
	return r, runErr
}

// abort stops the driver on err: running attempts are cancelled, their
// outcomes recorded (an interrupted one is not a failure), and the run is
// released for another instance unless the lease was lost.
func (dr *driver) abort(err error) (*Run, error) {
	dr.cancel(err)
	bg, cancel := context.WithTimeout(context.WithoutCancel(dr.ctx), writeTimeout)
	defer cancel()
	for len(dr.running) > 0 {
		if rerr := dr.record(bg, <-dr.results); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}
	dr.release()
	dr.lease.stop()
	if !errors.Is(err, wfstore.ErrLeaseLost) {
		if rerr := dr.e.st.ReleaseRun(bg, dr.runID, dr.e.cfg.InstanceID); rerr != nil {
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
