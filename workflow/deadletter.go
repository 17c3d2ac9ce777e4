package workflow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfstore"
)

// deadLetter handles a task that failed for good: OnTaskFailure, then the
// entry is added (addEntry: the manager's alert callbacks run), then its
// ID is stored with the task. It returns the entry's ID, empty when
// dead-lettering failed (logged). The callbacks may be slow: the run's
// lease is renewed meanwhile by keepLease.
func (dr *driver) deadLetter(ctx context.Context, ti *models.TaskInstance, err error) string {
	e := dr.e
	if err == nil {
		err = errors.New(ti.Error)
	}
	if cb := dr.d.prop.OnTaskFailure; cb != nil {
		var task *models.Task
		for _, t := range dr.d.model.Tasks {
			if t.ID == ti.TaskID {
				task = &t
			}
		}
		e.callback(ctx, "OnTaskFailure", func() error { return cb(ctx, task, ti, err) },
			slog.String("run_id", dr.runID), slog.String("dag_id", dr.d.id), slog.String("task_id", ti.TaskID))
	}
	// The callback may have run long: an instance that stalled past its
	// lease (paused, swapped out) leaves the failure to the instance that
	// took the run over. A stall after this check is caught by the
	// entry's ID (addEntry) and by SetDeadLetter's fence, and so is a
	// renewal the database did not answer (a killed connection): that
	// says nothing of who holds the run, and taken for a loss it left the
	// failure without a dead letter, which nobody else was to add.
	if _, lost := dr.renew(); lost != nil && !errors.Is(lost, store.ErrUnavailable) {
		e.log.LogAttrs(ctx, slog.LevelWarn, "run lost before its failed task was dead-lettered; the instance holding it does so",
			slog.String("run_id", dr.runID), slog.String("dag_id", dr.d.id), slog.String("task_id", ti.TaskID),
			slog.String("error", lost.Error()))
		dr.cancel(lost)
		return ""
	}
	var replayedFrom string
	if t := dr.task(ti.TaskID); t != nil {
		replayedFrom = t.ReplayOf
	}
	id, addErr := dr.addEntry(ctx, ti, replayedFrom, err)
	if addErr == nil {
		addErr = dr.setDeadLetter(ctx, ti.TaskID, id)
	}
	if addErr == nil {
		dr.deadLettered(ti.TaskID, id)
	}
	if errors.Is(addErr, wfstore.ErrLeaseLost) {
		// Stalled past the lease inside the add: the instance that took
		// the run over dead-letters the failure, under the same entry.
		e.log.LogAttrs(ctx, slog.LevelWarn, "run lost while its failed task was dead-lettered; the instance holding it does so",
			slog.String("run_id", dr.runID), slog.String("dag_id", dr.d.id), slog.String("task_id", ti.TaskID),
			slog.Int("attempt", ti.Attempt))
		return ""
	}
	if addErr != nil {
		e.log.LogAttrs(ctx, slog.LevelError, "dead-lettering a failed task failed", slog.String("run_id", dr.runID),
			slog.String("dag_id", dr.d.id), slog.String("task_id", ti.TaskID), slog.Int("attempt", ti.Attempt),
			slog.String("error", addErr.Error()))
		return ""
	}
	return id
}

// addEntry adds the dead letter of the failed attempt ti, under the ID
// entryKey gives it, and returns that ID. When the queue holds the entry
// already it adds nothing and returns the ID: another instance added it
// (this one stalled inside the add, past its lease, and the instance that
// took the run over dead-lettered the same failure), or a crash cut short
// what followed the add. Either way the failure keeps one entry, and its
// alerts ran once, where it was added.
func (dr *driver) addEntry(ctx context.Context, ti *models.TaskInstance, replayedFrom string, failure error) (string, error) {
	m := dr.e.dlqm
	en, err := m.FailedTaskEntry(ti, dr.d.Model(), failure)
	if err != nil {
		return "", err
	}
	en.ID = entryKey(dr.d.id, dr.runID, ti.TaskID, ti.Attempt, replayedFrom)
	// Tried again while the database is unavailable: a try that added
	// the entry before its connection went makes the next one find it
	// (ErrExists), which is taken as added below.
	_, addErr := dr.whileHeld(ctx, func(ctx context.Context) error { return m.Add(ctx, en) })
	if !errors.Is(addErr, dlq.ErrExists) {
		return en.ID, addErr
	}
	var had *dlq.Entry
	_, err = dr.whileHeld(ctx, func(ctx context.Context) (err error) {
		had, err = dr.e.dlq.Get(ctx, en.ID)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("%w (reading it: %w)", addErr, err)
	}
	if had.DAGRunID != dr.runID || had.TaskID != ti.TaskID || had.TaskInstanceID != ti.ID {
		return "", fmt.Errorf("%w: it is the entry of task instance %q of run %q", addErr, had.TaskInstanceID, had.DAGRunID)
	}
	dr.e.log.LogAttrs(ctx, slog.LevelInfo, "failed task dead-lettered already", slog.String("run_id", dr.runID),
		slog.String("dag_id", dr.d.id), slog.String("task_id", ti.TaskID), slog.Int("attempt", ti.Attempt),
		slog.String("dlq_id", en.ID))
	return en.ID, nil
}

// setDeadLetter records a failed task's dead-letter entry, tried again
// while the database is unavailable; setting the same entry twice changes
// nothing.
func (dr *driver) setDeadLetter(ctx context.Context, taskID, entryID string) error {
	_, err := dr.whileHeld(ctx, func(ctx context.Context) error {
		return dr.e.st.SetDeadLetter(ctx, dr.runID, taskID, entryID, dr.e.lease())
	})
	return err
}

// entryNamespace is the UUID namespace of entryKey.
var entryNamespace = uuid.MustParse("addd71a5-eb71-4ec7-b6c6-f1dc5d548e9d")

// entryKey returns the ID of the dead letter of a task's failed attempt: a
// name-based UUID (version 5) of the DAG, the run, the task, the attempt
// and the entry the task was replayed from (empty when none), which tells
// apart the failures a replay repeats without a new attempt (see
// settleFailures). Every instance dead-lettering the same failure derives
// the same ID, and a queue refuses a second entry under an ID it holds: a
// failure is parked once whatever stalls or runs twice. None of the parts
// holds a NUL (wfstore.CheckID), which separates them.
func entryKey(dagID, runID, taskID string, attempt int, replayedFrom string) string {
	name := strings.Join([]string{dagID, runID, taskID, strconv.Itoa(attempt), replayedFrom}, "\x00")
	return uuid.NewSHA1(entryNamespace, []byte(name)).String()
}

// findEntry looks in the dead-letter queue for the entry of the attempt
// not yet resolved, other than replayedFrom: a replayed task that ended
// before a new attempt has the task instance of the entry it was replayed
// from (and of any resolved earlier one), which must not pass for its new
// one.
func (dr *driver) findEntry(ctx context.Context, ti *models.TaskInstance, replayedFrom string) (string, error) {
	var entries []*dlq.Entry
	_, err := dr.whileHeld(ctx, func(ctx context.Context) (err error) {
		entries, err = dr.e.dlq.List(ctx, &dlq.Filters{DAGID: dr.d.id, TaskID: ti.TaskID})
		return err
	})
	if err != nil {
		return "", err
	}
	for _, en := range entries {
		if en.TaskInstanceID == ti.ID && en.ID != replayedFrom && en.Status != dlq.StatusResolved {
			return en.ID, nil
		}
	}
	return "", nil
}

// settleFailures finishes, once per driver, what a crash may have cut
// short: a failed task without its dead letter is dead-lettered (unless
// the queue has it already), and the dead letter a terminal task was
// replayed from is marked replayed and resolved.
//
// A replayed task that ended without running to success or failure
// (skipped: another task failed meanwhile under the fail policy; or
// upstream_failed) is dead-lettered again, so that its failure stays in a
// pending entry; the entry it was replayed from is resolved saying so.
// This holds also when it ended before a new attempt started (another
// task's failure still stops the run): its last failure is then the one
// of the entry it was replayed from, which the new entry repeats. Its new
// entry is settled when a later replay of the task it waits for makes it
// pending again (Store.Reopen).
func (dr *driver) settleFailures() {
	for i := range dr.snap.Tasks {
		// What follows acts only on these: the test comes before the
		// map's, which each pass made for every task of the run.
		if p := &dr.snap.Tasks[i]; !p.State.Terminal() ||
			(p.ReplayOf == "" && (p.State != models.TaskStateFailed || p.DeadLetter != "")) {
			continue
		}
		t := dr.snap.Tasks[i]
		if dr.handled[t.TaskID] {
			continue
		}
		again := t.ReplayOf != "" && t.State != models.TaskStateSuccess
		if (t.State == models.TaskStateFailed || again) && t.DeadLetter == "" {
			dr.handled[t.TaskID] = true
			ti := dr.failure(&t)
			id, err := dr.findEntry(dr.ctx, ti, t.ReplayOf)
			if err == nil && id != "" {
				if err = dr.setDeadLetter(dr.ctx, t.TaskID, id); err == nil {
					dr.deadLettered(t.TaskID, id)
				}
			} else if err == nil {
				id = dr.deadLetter(dr.ctx, ti, nil)
			}
			if err != nil {
				dr.e.log.LogAttrs(dr.ctx, slog.LevelError, "dead-lettering a failed task failed",
					slog.String("run_id", dr.runID), slog.String("task_id", t.TaskID), slog.String("error", err.Error()))
			}
			t.DeadLetter = id
		}
		if t.ReplayOf != "" {
			dr.handled[t.TaskID] = true
			dr.settleReplay(dr.ctx, t.ReplayOf, dr.instance(t.TaskID, t.Attempt, t.Error, t.EndedAt), t.State, t.DeadLetter)
		}
	}
}

// failure returns the attempt a terminal task that did not succeed is
// dead-lettered with. A replayed task that ended before a new attempt
// has no error of its own (the replay cleared it): its failure is still
// the one of the entry it was replayed from.
func (dr *driver) failure(t *wfstore.Task) *models.TaskInstance {
	ti := dr.instance(t.TaskID, t.Attempt, t.Error, t.EndedAt)
	if t.State == models.TaskStateFailed || t.Error != "" {
		return ti
	}
	ti.State = models.TaskStateFailed // the failure the replay did not repair
	ti.Error = fmt.Sprintf("task %s before a new attempt: %s", t.State, t.Reason)
	if from, err := dr.e.dlq.Get(dr.ctx, t.ReplayOf); err == nil && from.ErrorMessage != "" {
		ti.Error = fmt.Sprintf("%s (replayed from dead letter %s; the task was %s before a new attempt: %s)",
			from.ErrorMessage, t.ReplayOf, t.State, t.Reason)
	}
	return ti
}

// settleReplay marks the dead letter a task was replayed from as replayed
// and, once the task has ended, resolves it with a note saying how the
// replay went.
func (dr *driver) settleReplay(ctx context.Context, entryID string, ti *models.TaskInstance, state models.TaskState, newEntry string) {
	if entryID == "" {
		return
	}
	q := dr.e.dlq
	var entry *dlq.Entry
	_, err := dr.whileHeld(ctx, func(ctx context.Context) (err error) {
		entry, err = q.Get(ctx, entryID)
		return err
	})
	if err == nil && !entry.Replayed {
		// A try that marked it before its connection went makes the
		// next one find it replayed.
		_, err = dr.whileHeld(ctx, func(ctx context.Context) error { return q.Replay(ctx, entryID) })
		if errors.Is(err, dlq.ErrAlreadyReplayed) {
			err = nil
		}
	}
	if err == nil && entry.Status != dlq.StatusResolved {
		var notes string
		switch state {
		case models.TaskStateSuccess:
			notes = fmt.Sprintf("replayed by workflow instance %s: task %s of run %s succeeded on attempt %d",
				dr.e.cfg.InstanceID, ti.TaskID, dr.runID, ti.Attempt)
		case models.TaskStateFailed:
			notes = fmt.Sprintf("replayed by workflow instance %s: task %s of run %s failed again on attempt %d; new dead letter %s",
				dr.e.cfg.InstanceID, ti.TaskID, dr.runID, ti.Attempt, newEntry)
		default:
			notes = fmt.Sprintf("replayed by workflow instance %s: task %s of run %s ended %s without succeeding (attempt %d); new dead letter %s",
				dr.e.cfg.InstanceID, ti.TaskID, dr.runID, state, ti.Attempt, newEntry)
		}
		var retried bool
		retried, err = dr.whileHeld(ctx, func(ctx context.Context) error { return q.Resolve(ctx, entryID, notes) })
		if retried && err != nil {
			// A try whose outcome was unknown may have resolved it.
			if now, gerr := q.Get(ctx, entryID); gerr == nil && now.Status == dlq.StatusResolved {
				err = nil
			}
		}
	}
	if err != nil {
		dr.e.log.LogAttrs(ctx, slog.LevelWarn, "settling a replayed dead letter failed", slog.String("run_id", dr.runID),
			slog.String("task_id", ti.TaskID), slog.String("dlq_id", entryID), slog.String("error", err.Error()))
	}
}
