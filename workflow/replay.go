package workflow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfstore"
)

// ReplayTask repairs a run through the dead-letter queue: it reads the
// entry entryID (through Config.DLQ), takes the entry's failed task back to
// pending (its failures no longer count; its attempt numbers go on, and
// the run's history keeps the earlier attempts), takes the tasks that
// were upstream_failed or skipped because of it back to pending, marks the
// entry replayed, and drives the run until it ends again, so that a
// repaired run can still finish successfully. The entry is then resolved,
// with a note saying whether the task succeeded or failed again (a new
// failure is dead-lettered as a new entry).
//
// The run must have ended. ReplayTask fails with an error matching
// dlq.ErrNotFound for an unknown entry, ErrNotReplayable when the entry is
// not a workflow task's, was resolved (matching dlq.ErrResolved too), or
// its task is no longer failed with it (already replayed), ErrRunActive while the run runs, and ErrUnknownDAG when the
// DAG is not registered. Like Run, it returns the run with a *RunError when
// the run fails again. When the registered DAG is not the one the run was
// created with (its tasks, edges or policy changed since, or the entry
// names another DAG than the run's), ReplayTask fails with ErrDAGChanged
// and changes nothing: the run stays as it ended and the entry stays
// replayable, by an instance that registers the run's DAG as it was.
func (e *Engine) ReplayTask(ctx context.Context, entryID string) (*Run, error) {
	entry, err := e.dlq.Get(ctx, entryID)
	if err != nil {
		return nil, fmt.Errorf("workflow: replay %s: %w", entryID, err)
	}
	if entry.DAGRunID == "" || entry.TaskID == "" {
		return nil, fmt.Errorf("%w: entry %s is not a workflow task's", ErrNotReplayable, entryID)
	}
	if entry.Status == dlq.StatusResolved {
		// Dealt with and closed by an operator: the queue refuses to
		// replay it, and so does the engine. The task ran again, and the
		// run went on, however the operator had settled it.
		return nil, fmt.Errorf("%w: entry %s: %w; it can no longer be replayed", ErrNotReplayable, entryID, dlq.ErrResolved)
	}
	runID := entry.DAGRunID
	d, err := e.replayableDAG(ctx, entry)
	if err != nil {
		return nil, err
	}
	if !e.enter(runID) {
		return nil, fmt.Errorf("%w: run %s is being driven by this engine", ErrRunActive, runID)
	}
	defer e.leave(runID)
	err = e.st.Reopen(ctx, &wfstore.Reopen{RunID: runID, TaskID: entry.TaskID, EntryID: entryID, Lease: e.lease(),
		Reason: "pending: replayed from dead letter " + entryID})
	if errors.Is(err, wfstore.ErrConflict) {
		return nil, e.whyNotReplayable(ctx, entry, err)
	}
	if err != nil {
		return nil, fmt.Errorf("workflow: replay %s: %w", entryID, err)
	}
	e.log.LogAttrs(ctx, slog.LevelInfo, "task replayed", slog.String("run_id", runID), slog.String("dag_id", d.id),
		slog.String("task_id", entry.TaskID), slog.String("dlq_id", entryID))
	e.emit(Event{Time: e.cfg.Clock.Now(), RunID: runID, DAGID: d.id, RunState: models.RunStateRunning,
		Reason: fmt.Sprintf("task %s replayed from dead letter %s", entry.TaskID, entryID)})
	if err := e.dlq.Replay(ctx, entryID); err != nil && !errors.Is(err, dlq.ErrAlreadyReplayed) {
		e.log.LogAttrs(ctx, slog.LevelWarn, "marking a dead letter replayed failed", slog.String("run_id", runID),
			slog.String("dlq_id", entryID), slog.String("error", err.Error()))
	}
	return e.driveEntered(ctx, d, runID)
}

// replayableDAG returns the registered DAG the entry's run can be driven
// with. It is checked before the run is reopened: a run reopened for a
// DAG whose shape changed was refused by the driver and stayed running,
// with nobody to drive it, and its entry was no longer replayable.
func (e *Engine) replayableDAG(ctx context.Context, entry *dlq.Entry) (*DAG, error) {
	snap, err := e.st.Load(ctx, entry.DAGRunID)
	if errors.Is(err, wfstore.ErrNotFound) {
		return nil, fmt.Errorf("%w: entry %s: %w", ErrNotReplayable, entry.ID, err)
	}
	if err != nil {
		return nil, fmt.Errorf("workflow: replay %s: %w", entry.ID, err)
	}
	run := &snap.Run
	if entry.DAGID != run.DAGID {
		return nil, fmt.Errorf("%w: entry %s names DAG %q, but run %s is a run of DAG %q",
			ErrDAGChanged, entry.ID, entry.DAGID, run.ID, run.DAGID)
	}
	d, err := e.dag(run.DAGID)
	if err != nil {
		return nil, err
	}
	if run.DAGHash != d.hash {
		return nil, fmt.Errorf("%w: run %s of DAG %s was created with other tasks, edges or policy than those registered; replay it from an instance that registers them",
			ErrDAGChanged, run.ID, d.id)
	}
	return d, nil
}

// whyNotReplayable explains a Reopen conflict.
func (e *Engine) whyNotReplayable(ctx context.Context, entry *dlq.Entry, conflict error) error {
	snap, err := e.st.Load(ctx, entry.DAGRunID)
	if err != nil {
		return fmt.Errorf("%w: entry %s: %w", ErrNotReplayable, entry.ID, err)
	}
	if snap.Run.State == models.RunStateRunning {
		return fmt.Errorf("%w: run %s has not ended; replay its dead letters once it has", ErrRunActive, entry.DAGRunID)
	}
	t := snap.Task(entry.TaskID)
	if t == nil {
		return fmt.Errorf("%w: run %s has no task %s", ErrNotReplayable, entry.DAGRunID, entry.TaskID)
	}
	return fmt.Errorf("%w: task %s of run %s is %s, not failed with dead letter %s: %w",
		ErrNotReplayable, entry.TaskID, entry.DAGRunID, t.State, entry.ID, conflict)
}
