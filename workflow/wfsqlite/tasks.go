package wfsqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/backstophq/backstop/workflow/wfstore"
)

// Task statements, all by the primary key (run_id, task_id) of wf_tasks
// or (run_id, task_id, attempt) of wf_attempts.
const (
	// startTask is fenced: the task is claimable as the attempt after its
	// last, and the caller holds the run's live lease.
	startTask = `UPDATE {{prefix}}wf_tasks SET state = 'running', attempt = ?, owner = ?, started_at = ?,
		ended_at = NULL, next_attempt_at = NULL, reason = ''
		WHERE run_id = ? AND task_id = ? AND attempt = ? AND state IN ('pending', 'up_for_retry')
		  AND EXISTS (SELECT 1 FROM {{prefix}}wf_runs
		              WHERE id = ? AND state = 'running' AND owner = ? AND lease_expiry >= ?)`
	insertAttempt = `INSERT INTO {{prefix}}wf_attempts (run_id, task_id, attempt, owner, started_at, outcome)
		VALUES (?, ?, ?, ?, ?, 'running')`

	// finishTask is fenced on the attempt and its owner. error and result
	// keep their values when given NULL.
	finishTask = `UPDATE {{prefix}}wf_tasks SET state = ?, failures = ?, next_attempt_at = ?, owner = NULL,
		ended_at = ?, error = coalesce(?, error), reason = ?, cause = ?, result = coalesce(?, result)
		WHERE run_id = ? AND task_id = ? AND attempt = ? AND state = 'running' AND owner = ?`
	finishAttempt = `UPDATE {{prefix}}wf_attempts SET ended_at = ?, outcome = ?, error = ?
		WHERE run_id = ? AND task_id = ? AND attempt = ?`

	runHeld = `SELECT count(*) FROM {{prefix}}wf_runs WHERE id = ? AND state = 'running' AND owner = ?`
	// markTask's state list is filled in by Mark.
	markTask = `UPDATE {{prefix}}wf_tasks SET state = ?, reason = ?, cause = ?, next_attempt_at = ?
		WHERE run_id = ? AND task_id = ? AND state IN (%s)`
	setDeadLetter = `UPDATE {{prefix}}wf_tasks SET dead_letter = ? WHERE run_id = ? AND task_id = ?
		AND EXISTS (SELECT 1 FROM {{prefix}}wf_runs WHERE id = ? AND state = 'running' AND owner = ?)`
)

// StartAttempt implements wfstore.Store.
func (s *Store) StartAttempt(ctx context.Context, runID, taskID string, attempt int, l wfstore.Lease) error {
	now := l.Now.UnixMilli()
	return s.tx(ctx, func(tx *sql.Tx) error {
		n, err := affected(s.execHot(ctx, tx, s.hot.startTask, startTask, attempt, l.Owner, now,
			runID, taskID, attempt-1, runID, l.Owner, now))
		if err != nil {
			return fmt.Errorf("wfsqlite: start %s/%s attempt %d: %w", runID, taskID, attempt, err)
		}
		if n == 0 {
			return fmt.Errorf("%w: task %q of run %q cannot start attempt %d as %s",
				wfstore.ErrConflict, taskID, runID, attempt, l.Owner)
		}
		_, err = s.execHot(ctx, tx, s.hot.insertAttempt, insertAttempt, runID, taskID, attempt, l.Owner, now)
		return err
	})
}

// FinishAttempt implements wfstore.Store.
func (s *Store) FinishAttempt(ctx context.Context, f *wfstore.Finish) error {
	var taskErr, result any
	switch f.Outcome {
	case wfstore.OutcomeSuccess:
		taskErr = ""
		if f.Result != nil {
			result = f.Result
		}
	case wfstore.OutcomeFailed:
		taskErr = f.Error
	}
	return s.tx(ctx, func(tx *sql.Tx) error {
		n, err := affected(s.execHot(ctx, tx, s.hot.finishTask, finishTask, string(f.State), f.Failures, ms(f.NextAttemptAt),
			f.Now.UnixMilli(), taskErr, f.Reason, f.Cause, result, f.RunID, f.TaskID, f.Attempt, f.Owner))
		if err != nil {
			return fmt.Errorf("wfsqlite: finish %s/%s attempt %d: %w", f.RunID, f.TaskID, f.Attempt, err)
		}
		if n == 0 {
			return fmt.Errorf("%w: task %q of run %q is not running attempt %d of %s",
				wfstore.ErrConflict, f.TaskID, f.RunID, f.Attempt, f.Owner)
		}
		if f.Outcome == wfstore.OutcomeSuccess {
			if err := s.st.EnqueueTx(ctx, tx, f.Messages...); err != nil {
				return fmt.Errorf("wfsqlite: task %q of run %q: %w", f.TaskID, f.RunID, err)
			}
			for _, fn := range f.TxFuncs {
				if err := fn(ctx, tx); err != nil {
					return err
				}
			}
		}
		_, err = s.execHot(ctx, tx, s.hot.finishAttempt, finishAttempt, f.Now.UnixMilli(), string(f.Outcome), f.Error,
			f.RunID, f.TaskID, f.Attempt)
		return err
	})
}

// Mark implements wfstore.Store.
func (s *Store) Mark(ctx context.Context, runID string, l wfstore.Lease, marks []wfstore.Mark) (int, error) {
	moved := 0
	err := s.tx(ctx, func(tx *sql.Tx) error {
		moved = 0
		var held int
		if err := s.queryRowHot(ctx, tx, s.hot.runHeld, runHeld, runID, l.Owner).Scan(&held); err != nil {
			return err
		}
		if held == 0 {
			return fmt.Errorf("%w: run %q is not held by %s", wfstore.ErrLeaseLost, runID, l.Owner)
		}
		for _, m := range marks {
			args := []any{string(m.To), m.Reason, m.Cause, ms(m.NextAttemptAt), runID, m.TaskID}
			for _, st := range m.From {
				args = append(args, string(st))
			}
			stmt := fmt.Sprintf(markTask, strings.TrimSuffix(strings.Repeat("?, ", len(m.From)), ", "))
			n, err := affected(tx.ExecContext(ctx, s.q(stmt), args...))
			if err != nil {
				return fmt.Errorf("wfsqlite: mark %s/%s %s: %w", runID, m.TaskID, m.To, err)
			}
			moved += int(n)
		}
		return nil
	})
	return moved, err
}

// SetDeadLetter implements wfstore.Store.
func (s *Store) SetDeadLetter(ctx context.Context, runID, taskID, entryID string, l wfstore.Lease) error {
	n, err := s.exec(ctx, setDeadLetter, entryID, runID, taskID, runID, l.Owner)
	switch {
	case err != nil:
		return fmt.Errorf("wfsqlite: dead letter of %s/%s: %w", runID, taskID, err)
	case n == 0:
		return fmt.Errorf("wfsqlite: dead letter of %s/%s: %w: %s does not hold the running run", runID, taskID, wfstore.ErrLeaseLost, l.Owner)
	}
	return nil
}
