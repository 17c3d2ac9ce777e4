package wfpostgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop/workflow/wfstore"
)

// Task statements, all by the primary key (run_id, task_id) of wf_tasks or
// (run_id, task_id, attempt) of wf_attempts. A change fenced on the run
// first takes a share lock on the run's row (lockHeldRun), so that it
// cannot interleave with an instance taking the run over.
const (
	lockHeldRun = `SELECT 1 FROM {{T}}wf_runs
		WHERE id = $1 AND state = 'running' AND owner = $2 AND lease_expiry >= coalesce($3::timestamptz, now()) FOR SHARE`
	startTask = `UPDATE {{T}}wf_tasks SET state = 'running', attempt = $1, owner = $2, started_at = $3,
		ended_at = NULL, next_attempt_at = NULL, reason = ''
		WHERE run_id = $4 AND task_id = $5 AND attempt = $6 AND state IN ('pending', 'up_for_retry')`
	insertAttempt = `INSERT INTO {{T}}wf_attempts (run_id, task_id, attempt, owner, started_at, outcome)
		VALUES ($1, $2, $3, $4, $5, 'running')`

	// finishTask is fenced on the attempt and its owner. error and result
	// keep their values when given NULL.
	finishTask = `UPDATE {{T}}wf_tasks SET state = $1, failures = $2, next_attempt_at = $3, owner = NULL,
		ended_at = $4, error = coalesce($5, error), reason = $6, cause = $7, result = coalesce($8, result)
		WHERE run_id = $9 AND task_id = $10 AND attempt = $11 AND state = 'running' AND owner = $12`
	finishAttempt = `UPDATE {{T}}wf_attempts SET ended_at = $1, outcome = $2, error = $3
		WHERE run_id = $4 AND task_id = $5 AND attempt = $6`

	lockOwnedRun = `SELECT 1 FROM {{T}}wf_runs WHERE id = $1 AND state = 'running' AND owner = $2 FOR SHARE`
	markTask     = `UPDATE {{T}}wf_tasks SET state = $1, reason = $2, cause = $3, next_attempt_at = $4
		WHERE run_id = $5 AND task_id = $6 AND state = ANY($7::text[])`
	setDeadLetter = `UPDATE {{T}}wf_tasks SET dead_letter = $1 WHERE run_id = $2 AND task_id = $3
		AND EXISTS (SELECT 1 FROM {{T}}wf_runs WHERE id = $2 AND state = 'running' AND owner = $4)`
)

// StartAttempt implements wfstore.Store.
func (s *Store) StartAttempt(ctx context.Context, runID, taskID string, attempt int, l wfstore.Lease) error {
	conflict := fmt.Errorf("%w: task %q of run %q cannot start attempt %d as %s",
		wfstore.ErrConflict, taskID, runID, attempt, l.Owner)
	return s.tx(ctx, func(tx pgx.Tx) error {
		var one int
		err := tx.QueryRow(ctx, s.q(lockHeldRun), runID, l.Owner, s.leaseNow(l.Now)).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return conflict
		}
		if err != nil {
			return fmt.Errorf("wfpostgres: start %s/%s: %w", runID, taskID, err)
		}
		tag, err := tx.Exec(ctx, s.q(startTask), attempt, l.Owner, l.Now, runID, taskID, attempt-1)
		if err != nil {
			return fmt.Errorf("wfpostgres: start %s/%s attempt %d: %w", runID, taskID, attempt, err)
		}
		if tag.RowsAffected() == 0 {
			return conflict
		}
		_, err = tx.Exec(ctx, s.q(insertAttempt), runID, taskID, attempt, l.Owner, l.Now)
		return err
	})
}

// FinishAttempt implements wfstore.Store.
func (s *Store) FinishAttempt(ctx context.Context, f *wfstore.Finish) error {
	var taskErr *string
	var result []byte
	switch f.Outcome {
	case wfstore.OutcomeSuccess:
		empty := ""
		taskErr, result = &empty, f.Result
	case wfstore.OutcomeFailed:
		taskErr = &f.Error
	}
	return s.tx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, s.q(finishTask), string(f.State), f.Failures, ts(f.NextAttemptAt), f.Now, taskErr,
			f.Reason, f.Cause, result, f.RunID, f.TaskID, f.Attempt, f.Owner)
		if err != nil {
			return fmt.Errorf("wfpostgres: finish %s/%s attempt %d: %w", f.RunID, f.TaskID, f.Attempt, err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("%w: task %q of run %q is not running attempt %d of %s",
				wfstore.ErrConflict, f.TaskID, f.RunID, f.Attempt, f.Owner)
		}
		if f.Outcome == wfstore.OutcomeSuccess {
			if err := s.st.EnqueueTx(ctx, tx, f.Messages...); err != nil {
				return fmt.Errorf("wfpostgres: task %q of run %q: %w", f.TaskID, f.RunID, err)
			}
			for _, fn := range f.TxFuncs {
				if err := fn(ctx, tx); err != nil {
					if tx.Conn().IsClosed() {
						return err // the connection died under the function
					}
					return userError{err}
				}
			}
		}
		_, err = tx.Exec(ctx, s.q(finishAttempt), f.Now, string(f.Outcome), f.Error, f.RunID, f.TaskID, f.Attempt)
		return err
	})
}

// Mark implements wfstore.Store.
func (s *Store) Mark(ctx context.Context, runID string, l wfstore.Lease, marks []wfstore.Mark) (int, error) {
	moved := 0
	err := s.tx(ctx, func(tx pgx.Tx) error {
		moved = 0
		var one int
		err := tx.QueryRow(ctx, s.q(lockOwnedRun), runID, l.Owner).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: run %q is not held by %s", wfstore.ErrLeaseLost, runID, l.Owner)
		}
		if err != nil {
			return err
		}
		for _, m := range marks {
			from := make([]string, len(m.From))
			for i, st := range m.From {
				from[i] = string(st)
			}
			tag, err := tx.Exec(ctx, s.q(markTask), string(m.To), m.Reason, m.Cause, ts(m.NextAttemptAt), runID, m.TaskID, from)
			if err != nil {
				return fmt.Errorf("wfpostgres: mark %s/%s %s: %w", runID, m.TaskID, m.To, err)
			}
			moved += int(tag.RowsAffected())
		}
		return nil
	})
	return moved, err
}

// SetDeadLetter implements wfstore.Store.
func (s *Store) SetDeadLetter(ctx context.Context, runID, taskID, entryID string, l wfstore.Lease) error {
	n, err := s.exec(ctx, setDeadLetter, entryID, runID, taskID, l.Owner)
	switch {
	case err != nil:
		return fmt.Errorf("wfpostgres: dead letter of %s/%s: %w", runID, taskID, err)
	case n == 0:
		return fmt.Errorf("wfpostgres: dead letter of %s/%s: %w: %s does not hold the running run", runID, taskID, wfstore.ErrLeaseLost, l.Owner)
	}
	return nil
}
