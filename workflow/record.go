package workflow

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/internal/usercode"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/retry"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfstore"
)

// record stores the outcome of an attempt that ran in this engine and what
// follows from it for the task: success (with its result and side effects),
// a retry, a final failure (then dead-lettered), a cancellation by the fail
// policy, or an interruption that is not the task's fault.
//
// The outcome is written even when ctx has ended (the engine is shutting
// down): an attempt that finished must not be run again for want of a
// write.
func (dr *driver) record(ctx context.Context, r result) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	defer cancel()
	delete(dr.running, r.taskID)
	t := dr.task(r.taskID)
	now := dr.e.cfg.Clock.Now()
	f := &wfstore.Finish{RunID: dr.runID, TaskID: r.taskID, Attempt: r.attempt, Owner: dr.e.cfg.InstanceID,
		Now: now, Failures: t.Failures}
	switch {
	case r.err == nil:
		f.Outcome, f.State = wfstore.OutcomeSuccess, models.TaskStateSuccess
		f.Result, f.Messages, f.TxFuncs = r.tc.collected()
	case errors.Is(r.cause, ErrRunStopped):
		f.Outcome, f.State, f.Cause = wfstore.OutcomeCancelled, models.TaskStateSkipped, dr.stopped
		f.Reason, f.Error = reasonCancelled(dr.stopped), outbox.TruncateError(r.err.Error())
	case r.cause != nil && !errors.Is(r.cause, errAttemptTimeout):
		f.Outcome, f.State, f.NextAttemptAt = wfstore.OutcomeLost, models.TaskStateUpForRetry, now
		// The cause is the caller's (a context cancelled with it): cleaned
		// as every error text is, for a NUL in it made PostgreSQL refuse
		// the write.
		f.Error = outbox.TruncateError("interrupted: " + r.cause.Error())
		f.Reason = outbox.TruncateError(fmt.Sprintf("up for retry: attempt %d was interrupted (%s); it runs again and does not count as a failure",
			r.attempt, r.cause))
	default:
		dr.fail(f, r.err)
	}
	// Every write here is tried again while the database is unavailable
	// (whileHeld), except a success's: its messages and OnCommit
	// functions are not run twice. unknown says whether a write's outcome
	// is unknown, so that a refusal of a later one may be the driver's
	// own write, recorded already.
	first, unknown := f, false
	var err error
	if f.Outcome == wfstore.OutcomeSuccess {
		err = dr.e.st.FinishAttempt(ctx, f)
		unknown = errors.Is(err, store.ErrUnavailable)
	} else {
		unknown, err = dr.whileHeld(ctx, func(ctx context.Context) error { return dr.e.st.FinishAttempt(ctx, f) })
	}
	if err != nil && f.Outcome == wfstore.OutcomeSuccess && errors.Is(err, store.ErrUnavailable) {
		// The database went away while the success was recorded (its
		// connection was killed, a failover): nothing the attempt wrote
		// was committed, and that is not the task's failure. As when the
		// instance crashes there, the attempt is lost: it runs again at
		// once, no failure counted. That is tried again while the lease
		// holds; if the database does not answer by then, the driver
		// stops and the attempt is found lost when the run is resumed.
		f = &wfstore.Finish{RunID: f.RunID, TaskID: f.TaskID, Attempt: f.Attempt, Owner: f.Owner, Now: now,
			Outcome: wfstore.OutcomeLost, State: models.TaskStateUpForRetry, Failures: t.Failures, NextAttemptAt: now,
			Error: outbox.TruncateError("interrupted: recording the success failed: " + err.Error()),
			Reason: fmt.Sprintf("up for retry: the database was unavailable while attempt %d's success was recorded, so nothing it wrote was kept; it runs again and does not count as a failure",
				f.Attempt)}
		_, err = dr.whileHeld(ctx, func(ctx context.Context) error { return dr.e.st.FinishAttempt(ctx, f) })
	} else if err != nil && f.Outcome == wfstore.OutcomeSuccess && !errors.Is(err, wfstore.ErrConflict) {
		// The success could not be committed (a message or an OnCommit
		// function failed): the attempt failed, and nothing it wrote
		// exists.
		if ctx.Err() != nil {
			// The transaction outlasted writeTimeout (an OnCommit function
			// as slow): the driver stopped, the task left running, and
			// every resume ran it and timed it out again, for ever. It is
			// the attempt's failure, recorded under a new deadline; a
			// commit the timeout cut short may have been made, which the
			// refusal of the failure then shows (unknown).
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
			defer cancel()
			unknown = true
		}
		r.err = fmt.Errorf("recording the success: %w", err)
		f = &wfstore.Finish{RunID: f.RunID, TaskID: f.TaskID, Attempt: f.Attempt, Owner: f.Owner, Now: now,
			Failures: t.Failures}
		dr.fail(f, r.err)
		var retried bool
		retried, err = dr.whileHeld(ctx, func(ctx context.Context) error { return dr.e.st.FinishAttempt(ctx, f) })
		unknown = unknown || retried
	}
	if unknown && errors.Is(err, wfstore.ErrConflict) {
		// An earlier write may have been recorded: a refusal taken for
		// the lease's loss stopped the driver, though it held the run.
		if got, rerr := dr.recorded(ctx, f, first); rerr != nil {
			err = errors.Join(err, rerr)
		} else if got != nil {
			f, err, dr.stale = got, nil, true
		}
	}
	if err != nil {
		if errors.Is(err, wfstore.ErrConflict) {
			err = fmt.Errorf("%w: %w", wfstore.ErrLeaseLost, err)
		}
		return fmt.Errorf("workflow: run %s: %w", dr.runID, err)
	}
	replayOf := t.ReplayOf
	dr.finished(f)
	dr.logFinish(ctx, f)
	dr.e.emit(Event{Time: now, RunID: dr.runID, DAGID: dr.d.id, TaskID: f.TaskID, Attempt: f.Attempt,
		TaskState: f.State, Reason: f.Reason, NextAttemptAt: f.NextAttemptAt})
	switch f.State {
	case models.TaskStateFailed:
		dr.handled[f.TaskID] = true
		ti := dr.instance(f.TaskID, f.Attempt, f.Error, now)
		id := dr.deadLetter(ctx, ti, r.err)
		dr.settleReplay(ctx, replayOf, ti, models.TaskStateFailed, id)
	case models.TaskStateSuccess:
		dr.settleReplay(ctx, replayOf, dr.instance(f.TaskID, f.Attempt, "", now), models.TaskStateSuccess, "")
	}
	return nil
}

// writeTimeout bounds the writes that record outcomes after the caller's
// context has ended.
const writeTimeout = 30 * time.Second

// fail fills f for a failed attempt: a retry if the error is not permanent,
// the task has retries left and its strategy gives a delay; otherwise a
// final failure, with the reason in words.
func (dr *driver) fail(f *wfstore.Finish, err error) {
	task := dr.d.task(f.TaskID)
	f.Outcome = wfstore.OutcomeFailed
	f.Failures++
	f.Error = outbox.TruncateError(err.Error())
	v := dr.e.classify(err)
	permanent := v.Class == errorhandling.ClassPermanent
	delay := retry.Stop
	if !permanent && f.Failures <= task.Retries {
		if delay = dr.retryDelay(task, f); delay >= 0 {
			delay = max(delay, v.RetryAfter)
		}
	}
	switch {
	case delay >= 0:
		f.State, f.NextAttemptAt = models.TaskStateUpForRetry, f.Now.Add(delay)
		f.Reason = fmt.Sprintf("up for retry: attempt %d failed (%s); retry %d of %d at %s", f.Attempt, f.Error,
			f.Failures, task.Retries, f.NextAttemptAt.Format(time.RFC3339))
	case permanent:
		f.State = models.TaskStateFailed
		f.Reason = fmt.Sprintf("failed: %s (attempt %d; permanent error, not retried)", f.Error, f.Attempt)
	case task.Retries == 0:
		f.State = models.TaskStateFailed
		f.Reason = fmt.Sprintf("failed: %s (attempt %d; no retries allowed)", f.Error, f.Attempt)
	case f.Failures > task.Retries:
		f.State = models.TaskStateFailed
		f.Reason = fmt.Sprintf("failed: %s (attempt %d; gave up after %d failed attempts, %d %s allowed)", f.Error,
			f.Attempt, f.Failures, task.Retries, plural(task.Retries, "retry", "retries"))
	default:
		f.State = models.TaskStateFailed
		f.Reason = fmt.Sprintf("failed: %s (attempt %d; the retry strategy stopped after %d failed %s)", f.Error,
			f.Attempt, f.Failures, plural(f.Failures, "attempt", "attempts"))
	}
}

// retryDelay is the task's strategy's wait before retry f.Failures. A
// strategy that panics (a table of delays shorter than Retries) or calls
// runtime.Goexit must not take the process or the driver down, and again
// on every resume of the run, the attempt's failure never recorded: the
// wait is then the default strategy's (retry.DefaultExponentialBackoff),
// so the task is retried as its retries allow, and what happened is
// logged at ERROR (usercode.Run).
func (dr *driver) retryDelay(task *Task, f *wfstore.Finish) (d time.Duration) {
	if task.Strategy == nil {
		return retry.DefaultExponentialBackoff().Delay(f.Failures)
	}
	if usercode.Run(dr.ctx, dr.e.log, "the retry strategy", "; the default back-off is used",
		func() { d = task.Strategy.Delay(f.Failures) },
		slog.String("run_id", dr.runID), slog.String("dag_id", dr.d.id), slog.String("task_id", f.TaskID),
		slog.Int("attempt", f.Attempt)) {
		return d
	}
	return retry.DefaultExponentialBackoff().Delay(f.Failures)
}

// logFinish writes the record of an attempt's end: failures for good at
// WARN, retries at INFO, the rest at DEBUG.
func (dr *driver) logFinish(ctx context.Context, f *wfstore.Finish) {
	level, msg := slog.LevelDebug, "task ended"
	switch f.State {
	case models.TaskStateFailed:
		level, msg = slog.LevelWarn, "task failed"
	case models.TaskStateUpForRetry:
		level, msg = slog.LevelInfo, "task up for retry"
	}
	attrs := []slog.Attr{slog.String("run_id", dr.runID), slog.String("dag_id", dr.d.id),
		slog.String("task_id", f.TaskID), slog.Int("attempt", f.Attempt), slog.String("state", string(f.State))}
	if f.Reason != "" {
		attrs = append(attrs, slog.String("reason", f.Reason))
	}
	if f.Error != "" {
		attrs = append(attrs, slog.String("error", f.Error))
	}
	dr.e.log.LogAttrs(ctx, level, msg, attrs...)
}

// settleLost records the attempts left running by a previous holder of the
// run (every running attempt this driver did not start) as lost: the task
// is up for retry at once and the attempt does not count as a failure. A
// previous holder that records its outcome first wins. It reports whether
// it changed anything.
func (dr *driver) settleLost() (bool, error) {
	now := dr.e.cfg.Clock.Now()
	changed := false
	for i := range dr.snap.Tasks {
		if dr.snap.Tasks[i].State != models.TaskStateRunning {
			continue // tested first: the map's test, made for every task of the run, cost more
		}
		t := dr.snap.Tasks[i]
		if _, ours := dr.running[t.TaskID]; ours {
			continue
		}
		f := &wfstore.Finish{RunID: dr.runID, TaskID: t.TaskID, Attempt: t.Attempt, Owner: t.Owner, Now: now,
			Outcome: wfstore.OutcomeLost, State: models.TaskStateUpForRetry, Failures: t.Failures, NextAttemptAt: now,
			Error: fmt.Sprintf("lost: instance %s stopped holding the run during the attempt", t.Owner),
			Reason: fmt.Sprintf("up for retry: attempt %d was lost when instance %s stopped; it runs again and does not count as a failure",
				t.Attempt, t.Owner)}
		_, err := dr.whileHeld(dr.ctx, func(ctx context.Context) error { return dr.e.st.FinishAttempt(ctx, f) })
		if errors.Is(err, wfstore.ErrConflict) {
			// Settled by the previous holder, unless the row is as it
			// was: a running task whose owner no fenced update matches
			// (a NULL owner written by hand) made the driver retry
			// thousands of times a second.
			if still, lerr := dr.stillRunning(t.TaskID, t.Attempt, t.Owner); lerr != nil {
				return false, lerr
			} else if still {
				return false, fmt.Errorf("workflow: run %s: task %s is running attempt %d for owner %q, and recording it lost changes nothing: the row is not one the engine wrote",
					dr.runID, t.TaskID, t.Attempt, t.Owner)
			}
		}
		if err == nil || errors.Is(err, wfstore.ErrConflict) {
			changed = true // settled, by this driver or by the previous holder
		} else {
			dr.stale = true // whether it was recorded is not known
			dr.e.log.LogAttrs(dr.ctx, slog.LevelWarn, "recording a lost attempt failed", slog.String("run_id", dr.runID),
				slog.String("task_id", t.TaskID), slog.Int("attempt", t.Attempt), slog.String("error", err.Error()))
		}
		if err == nil {
			dr.logFinish(dr.ctx, f)
			dr.e.emit(Event{Time: now, RunID: dr.runID, DAGID: dr.d.id, TaskID: t.TaskID, Attempt: t.Attempt,
				TaskState: f.State, Reason: f.Reason, NextAttemptAt: now})
		}
	}
	return changed, nil
}

// stillRunning reports whether the stored task is still running attempt
// for owner.
func (dr *driver) stillRunning(taskID string, attempt int, owner string) (bool, error) {
	snap, err := dr.read(dr.ctx)
	if err != nil {
		return false, err
	}
	for _, t := range snap.Tasks {
		if t.TaskID == taskID {
			return t.State == models.TaskStateRunning && t.Attempt == attempt && t.Owner == owner, nil
		}
	}
	return false, nil
}

// instance returns an attempt as plain data.
func (dr *driver) instance(taskID string, attempt int, errText string, ended time.Time) *models.TaskInstance {
	ti := &models.TaskInstance{ID: instanceID(dr.runID, taskID, attempt), TaskID: taskID, DAGRunID: dr.runID,
		DAGID: dr.d.id, Attempt: attempt, State: models.TaskStateFailed, EndedAt: ended, Error: errText}
	if errText == "" {
		ti.State = models.TaskStateSuccess
	}
	if a := dr.attempt(taskID, attempt); a != nil {
		ti.StartedAt = a.StartedAt
	}
	return ti
}
