package workflow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfstore"
)

// defaultOlderShapeGrace is Config.OlderShapeGrace's default.
const defaultOlderShapeGrace = 10 * time.Minute

// endOutdated ends, failed, the runs of another shape of the DAGs
// registered here that nobody has driven for Config.OlderShapeGrace
// (wfstore.Store.Outdated): no instance registers their shape any more,
// and left running they were never taken again.
func (e *Engine) endOutdated(ctx context.Context) {
	if e.cfg.OlderShapeGrace < 0 {
		return
	}
	ids, err := e.st.Outdated(ctx, e.lease(), e.cfg.OlderShapeGrace, abandonedBatch, e.shapes())
	if err != nil {
		if ctx.Err() == nil {
			e.log.LogAttrs(ctx, slog.LevelWarn, "looking for runs of older DAG shapes failed", slog.String("error", err.Error()))
		}
		return
	}
	for _, id := range ids {
		if err := e.endOutdatedRun(ctx, id); err != nil && ctx.Err() == nil {
			e.log.LogAttrs(ctx, slog.LevelWarn, "ending a run of an older DAG shape failed", slog.String("run_id", id),
				slog.String("error", err.Error()))
		}
	}
}

// endOutdatedRun takes the run's lease and, if it is still running in
// another shape than its DAG's registered one, ends it failed: attempts
// left running are recorded lost, the tasks that have not ended are
// skipped, the run's reason says what changed, and the registered DAG's
// OnDAGFailure is called. A run another instance took meanwhile is left
// to it.
func (e *Engine) endOutdatedRun(ctx context.Context, runID string) (err error) {
	if !e.enter(runID) {
		return nil
	}
	defer e.leave(runID)
	if err := e.st.AcquireRun(ctx, runID, e.lease()); err != nil {
		if errors.Is(err, wfstore.ErrLeased) || errors.Is(err, wfstore.ErrRunEnded) {
			return nil
		}
		return err
	}
	ended := false
	defer func() {
		if !ended {
			err = errors.Join(err, e.st.ReleaseRun(context.WithoutCancel(ctx), runID, e.lease()))
		}
	}()
	snap, err := e.st.Load(ctx, runID)
	if err != nil {
		return err
	}
	d, err := e.dag(snap.Run.DAGID)
	if err != nil || snap.Run.DAGHash == d.hash || snap.Run.State.Terminal() {
		return err
	}
	reason := e.outdatedReason(d, snap)
	taskReason := fmt.Sprintf("not run: the run ended because DAG %q changed since the run was created", d.id)
	now := e.cfg.Clock.Now()
	var marks []wfstore.Mark
	for _, t := range snap.Tasks {
		switch t.State {
		case models.TaskStateRunning:
			f := &wfstore.Finish{RunID: runID, TaskID: t.TaskID, Attempt: t.Attempt, Owner: t.Owner, Now: now,
				Outcome: wfstore.OutcomeLost, State: models.TaskStateSkipped, Failures: t.Failures,
				Error:  fmt.Sprintf("lost: instance %s stopped holding the run during the attempt", t.Owner),
				Reason: taskReason}
			if err := e.st.FinishAttempt(ctx, f); err != nil && !errors.Is(err, wfstore.ErrConflict) {
				return err
			}
		case models.TaskStatePending, models.TaskStateUpForRetry:
			marks = append(marks, wfstore.Mark{TaskID: t.TaskID, To: models.TaskStateSkipped, Reason: taskReason,
				From: []models.TaskState{models.TaskStatePending, models.TaskStateUpForRetry}})
		}
	}
	if len(marks) > 0 {
		if _, err := e.st.Mark(ctx, runID, e.lease(), marks); err != nil {
			return err
		}
	}
	l := e.lease()
	if ended, err = e.st.EndRun(ctx, runID, l, models.RunStateFailed, reason); err != nil || !ended {
		return err
	}
	// The run has ended: nobody drives it again, so what follows (reading
	// it, OnDAGFailure) is done even if Work's context ends now, as
	// driver.finish does.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	defer cancel()
	e.log.LogAttrs(ctx, slog.LevelWarn, "run ended", slog.String("run_id", runID), slog.String("dag_id", d.id),
		slog.String("state", string(models.RunStateFailed)), slog.String("reason", reason))
	e.emit(Event{Time: l.Now, RunID: runID, DAGID: d.id, RunState: models.RunStateFailed, Reason: reason})
	if cb := d.prop.OnDAGFailure; cb != nil {
		snap, err := e.st.Load(ctx, runID)
		if err != nil {
			return err
		}
		r, runErr := e.report(d, snap)
		run := &models.DAGRun{ID: r.ID, DAGID: r.DAGID, State: r.State, StartedAt: r.CreatedAt, EndedAt: r.EndedAt}
		e.callback(ctx, "OnDAGFailure", func() error { return cb(ctx, run, runErr) },
			slog.String("run_id", runID), slog.String("dag_id", d.id))
	}
	return nil
}

// outdatedReason says how the run's DAG changed since the run was
// created, and what became of the run.
func (e *Engine) outdatedReason(d *DAG, snap *wfstore.Snapshot) string {
	had := make(map[string]bool, len(snap.Tasks))
	var removed, added []string
	for _, t := range snap.Tasks {
		had[t.TaskID] = true
		if _, ok := d.index[t.TaskID]; !ok {
			removed = append(removed, t.TaskID)
		}
	}
	for _, id := range d.order {
		if !had[id] {
			added = append(added, id)
		}
	}
	slices.Sort(added)
	var what []string
	if len(removed) > 0 {
		what = append(what, fmt.Sprintf("tasks %q removed or renamed", removed))
	}
	if len(added) > 0 {
		what = append(what, fmt.Sprintf("tasks %q added", added))
	}
	if snap.Run.Upstream != nil {
		var rewired []string
		for id, up := range d.edges() {
			if old, ok := snap.Run.Upstream[id]; ok && !sameSet(old, up) {
				rewired = append(rewired, id)
			}
		}
		slices.Sort(rewired)
		if len(rewired) > 0 {
			what = append(what, fmt.Sprintf("the dependencies of %q changed", rewired))
		}
	}
	if len(what) == 0 {
		what = append(what, "its failure policy, critical tasks or allowed failures changed")
	}
	return fmt.Sprintf("ended without running its remaining tasks: DAG %q changed since the run was created (%s), and no instance running the run's shape took it over in %s; start a new run of the DAG as it is now",
		d.id, strings.Join(what, "; "), e.cfg.OlderShapeGrace)
}

// sameSet reports whether a and b hold the same IDs.
func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
