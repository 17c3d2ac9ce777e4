package wfsqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfstore"
)

// Loading a run: three reads by primary key (prefix), in one transaction so
// that the tasks and attempts agree.
const (
	selectRun = `SELECT id, dag_id, dag_hash, state, reason, input, coalesce(owner, ''), lease_expiry,
		created_at, ended_at, coalesce(upstream, '') FROM {{prefix}}wf_runs WHERE id = ?`
	selectTasks = `SELECT task_id, state, attempt, failures, next_attempt_at, coalesce(owner, ''), started_at,
		ended_at, error, reason, cause, result, dead_letter, replay_of
		FROM {{prefix}}wf_tasks WHERE run_id = ? ORDER BY task_id`
	selectAttempts = `SELECT task_id, attempt, owner, started_at, ended_at, outcome, error
		FROM {{prefix}}wf_attempts WHERE run_id = ? ORDER BY task_id, attempt`

	// Reload's reads: the run without its input, the tasks with the size
	// of their results instead (length of a blob reads its header, not
	// its pages; -1 for none), then each result the reader lacks.
	reselectRun = `SELECT id, dag_id, dag_hash, state, reason, NULL, coalesce(owner, ''), lease_expiry,
		created_at, ended_at, coalesce(upstream, '') FROM {{prefix}}wf_runs WHERE id = ?`
	reselectTasks = `SELECT task_id, state, attempt, failures, next_attempt_at, coalesce(owner, ''), started_at,
		ended_at, error, reason, cause, coalesce(length(result), -1), dead_letter, replay_of
		FROM {{prefix}}wf_tasks WHERE run_id = ? ORDER BY task_id`
	selectResult = `SELECT result FROM {{prefix}}wf_tasks WHERE run_id = ? AND task_id = ?`
)

// Load implements wfstore.Store.
func (s *Store) Load(ctx context.Context, runID string) (*wfstore.Snapshot, error) {
	if err := wfstore.CheckID(runID); err != nil {
		return nil, fmt.Errorf("%w: %q (%v)", wfstore.ErrNotFound, runID, err)
	}
	return s.loadOrReload(ctx, runID, nil)
}

// Reload implements wfstore.Store.
func (s *Store) Reload(ctx context.Context, prev *wfstore.Snapshot) (*wfstore.Snapshot, error) {
	return s.loadOrReload(ctx, prev.Run.ID, prev)
}

// loadOrReload is Load when prev is nil, and Reload otherwise.
func (s *Store) loadOrReload(ctx context.Context, runID string, prev *wfstore.Snapshot) (*wfstore.Snapshot, error) {
	var snap *wfstore.Snapshot
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var err error
		snap, err = s.load(ctx, tx, runID, prev)
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: %q", wfstore.ErrNotFound, runID)
	}
	if err != nil {
		return nil, fmt.Errorf("wfsqlite: load run %q: %w", runID, err)
	}
	return snap, nil
}

// load reads the run; with prev, as Reload does.
func (s *Store) load(ctx context.Context, tx *sql.Tx, runID string, prev *wfstore.Snapshot) (*wfstore.Snapshot, error) {
	snap := &wfstore.Snapshot{}
	r := &snap.Run
	var state string
	var lease int64
	var created sql.NullInt64
	var ended sql.NullInt64
	var up string
	var err error
	qRun, qTasks := selectRun, selectTasks
	if prev != nil {
		qRun, qTasks = reselectRun, reselectTasks
	}
	if err = tx.QueryRowContext(ctx, s.q(qRun), runID).Scan(&r.ID, &r.DAGID, &r.DAGHash, &state, &r.Reason,
		&r.Input, &r.Owner, &lease, &created, &ended, &up); err != nil {
		return nil, unreadable(runID, "wf_runs", err)
	}
	if prev != nil {
		r.Input = prev.Run.Input
	}
	if r.Upstream, err = wfstore.DecodeUpstream(up); err != nil {
		return nil, &wfstore.UnreadableError{RunID: runID, Table: "wf_runs", Err: err}
	}
	r.State = models.RunState(state)
	r.LeaseExpiry = fromMs(sql.NullInt64{Int64: lease, Valid: true})
	r.CreatedAt, r.EndedAt = fromMs(created), fromMs(ended)

	rows, err := tx.QueryContext(ctx, s.q(qTasks), runID)
	if err != nil {
		return nil, err
	}
	known := wfstore.Known(prev)
	var unknown []int // indexes in snap.Tasks of the results to read
	for rows.Next() {
		t := wfstore.Task{RunID: runID}
		var next, started, ended sql.NullInt64
		var size int64
		result := any(&t.Result)
		if prev != nil {
			result = &size
		}
		if err := rows.Scan(&t.TaskID, &state, &t.Attempt, &t.Failures, &next, &t.Owner, &started, &ended,
			&t.Error, &t.Reason, &t.Cause, result, &t.DeadLetter, &t.ReplayOf); err != nil {
			rows.Close()
			return nil, unreadable(runID, "wf_tasks", err)
		}
		t.State = models.TaskState(state)
		t.NextAttemptAt, t.StartedAt, t.EndedAt = fromMs(next), fromMs(started), fromMs(ended)
		if prev != nil {
			var ok bool
			if t.Result, ok = known.Result(t.TaskID, t.Attempt, size); !ok {
				unknown = append(unknown, len(snap.Tasks))
			}
		}
		snap.Tasks = append(snap.Tasks, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, i := range unknown {
		t := &snap.Tasks[i]
		if err := tx.QueryRowContext(ctx, s.q(selectResult), runID, t.TaskID).Scan(&t.Result); err != nil {
			return nil, unreadable(runID, "wf_tasks", err)
		}
	}

	rows, err = tx.QueryContext(ctx, s.q(selectAttempts), runID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		a := wfstore.Attempt{RunID: runID}
		var started, ended sql.NullInt64
		var outcome string
		if err := rows.Scan(&a.TaskID, &a.Number, &a.Owner, &started, &ended, &outcome, &a.Error); err != nil {
			return nil, unreadable(runID, "wf_attempts", err)
		}
		a.Outcome = wfstore.Outcome(outcome)
		a.StartedAt, a.EndedAt = fromMs(started), fromMs(ended)
		snap.Attempts = append(snap.Attempts, a)
	}
	return snap, rows.Err()
}

// unreadable returns err as an *wfstore.UnreadableError of a row of table
// when it is database/sql's failure to convert a column's value (its
// "Scan error on column index N, name ..." names the column and the
// value), and err as it is otherwise (no row, a failed query).
func unreadable(runID, table string, err error) error {
	if strings.HasPrefix(err.Error(), "sql: Scan error on column") {
		return &wfstore.UnreadableError{RunID: runID, Table: table, Err: err}
	}
	return err
}
