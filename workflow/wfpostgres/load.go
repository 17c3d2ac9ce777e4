package wfpostgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfstore"
)

// Loading a run: three reads by primary key (prefix), in one repeatable-read
// transaction so that the tasks and attempts agree.
const (
	selectRun = `SELECT id, dag_id, dag_hash, state, reason, input, coalesce(owner, ''),
		nullif(lease_expiry, '-infinity'), created_at, ended_at, coalesce(upstream::text, '') FROM {{T}}wf_runs WHERE id = $1`
	selectTasks = `SELECT task_id, state, attempt, failures, next_attempt_at, coalesce(owner, ''), started_at,
		ended_at, error, reason, cause, result, dead_letter, replay_of
		FROM {{T}}wf_tasks WHERE run_id = $1 ORDER BY task_id`
	selectAttempts = `SELECT task_id, attempt, owner, started_at, ended_at, outcome, error
		FROM {{T}}wf_attempts WHERE run_id = $1 ORDER BY task_id, attempt`

	// Reload's reads: the run without its input, the tasks with the size
	// of their results instead (octet_length of a TOASTed bytea reads its
	// header, not the value; -1 for none), then the results the reader
	// lacks, by primary key.
	reselectRun = `SELECT id, dag_id, dag_hash, state, reason, NULL::bytea, coalesce(owner, ''),
		nullif(lease_expiry, '-infinity'), created_at, ended_at, coalesce(upstream::text, '') FROM {{T}}wf_runs WHERE id = $1`
	reselectTasks = `SELECT task_id, state, attempt, failures, next_attempt_at, coalesce(owner, ''), started_at,
		ended_at, error, reason, cause, coalesce(octet_length(result), -1)::bigint, dead_letter, replay_of
		FROM {{T}}wf_tasks WHERE run_id = $1 ORDER BY task_id`
	selectResults = `SELECT task_id, result FROM {{T}}wf_tasks WHERE run_id = $1 AND task_id = ANY($2::text[])`
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
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error {
			var err error
			snap, err = s.load(ctx, tx, runID, prev)
			return err
		})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: %q", wfstore.ErrNotFound, runID)
	}
	if err != nil {
		return nil, fmt.Errorf("wfpostgres: load run %q: %w", runID, classify(err))
	}
	return snap, nil
}

// load reads the run; with prev, as Reload does.
func (s *Store) load(ctx context.Context, tx pgx.Tx, runID string, prev *wfstore.Snapshot) (*wfstore.Snapshot, error) {
	snap := &wfstore.Snapshot{}
	r := &snap.Run
	var state string
	var lease, ended *time.Time
	var up string
	var err error
	qRun, qTasks := selectRun, selectTasks
	if prev != nil {
		qRun, qTasks = reselectRun, reselectTasks
	}
	if err = tx.QueryRow(ctx, s.q(qRun), runID).Scan(&r.ID, &r.DAGID, &r.DAGHash, &state, &r.Reason,
		&r.Input, &r.Owner, &lease, &r.CreatedAt, &ended, &up); err != nil {
		return nil, unreadable(runID, "wf_runs", err)
	}
	if prev != nil {
		r.Input = prev.Run.Input
	}
	if r.Upstream, err = wfstore.DecodeUpstream(up); err != nil {
		return nil, &wfstore.UnreadableError{RunID: runID, Table: "wf_runs", Err: err}
	}
	r.State = models.RunState(state)
	r.LeaseExpiry, r.CreatedAt, r.EndedAt = fromTs(lease), r.CreatedAt.UTC(), fromTs(ended)

	rows, err := tx.Query(ctx, s.q(qTasks), runID)
	if err != nil {
		return nil, err
	}
	known := wfstore.Known(prev)
	unknown := map[string]int{} // index in snap.Tasks of each result to read
	for rows.Next() {
		t := wfstore.Task{RunID: runID}
		var next, started, ended *time.Time
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
		t.NextAttemptAt, t.StartedAt, t.EndedAt = fromTs(next), fromTs(started), fromTs(ended)
		if prev != nil {
			var ok bool
			if t.Result, ok = known.Result(t.TaskID, t.Attempt, size); !ok {
				unknown[t.TaskID] = len(snap.Tasks)
			}
		}
		snap.Tasks = append(snap.Tasks, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if err := s.readResults(ctx, tx, snap, unknown); err != nil {
		return nil, err
	}

	rows, err = tx.Query(ctx, s.q(selectAttempts), runID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		a := wfstore.Attempt{RunID: runID}
		var ended *time.Time
		var outcome string
		if err := rows.Scan(&a.TaskID, &a.Number, &a.Owner, &a.StartedAt, &ended, &outcome, &a.Error); err != nil {
			return nil, unreadable(runID, "wf_attempts", err)
		}
		a.Outcome = wfstore.Outcome(outcome)
		a.StartedAt, a.EndedAt = a.StartedAt.UTC(), fromTs(ended)
		snap.Attempts = append(snap.Attempts, a)
	}
	return snap, rows.Err()
}

// readResults reads the results of the tasks of snap named in unknown
// (by ID, with their index in snap.Tasks).
func (s *Store) readResults(ctx context.Context, tx pgx.Tx, snap *wfstore.Snapshot, unknown map[string]int) error {
	if len(unknown) == 0 {
		return nil
	}
	ids := make([]string, 0, len(unknown))
	for id := range unknown {
		ids = append(ids, id)
	}
	rows, err := tx.Query(ctx, s.q(selectResults), snap.Run.ID, ids)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var result []byte
		if err := rows.Scan(&id, &result); err != nil {
			return unreadable(snap.Run.ID, "wf_tasks", err)
		}
		if i, ok := unknown[id]; ok {
			snap.Tasks[i].Result = result
		}
	}
	return rows.Err()
}

// unreadable returns err as an *wfstore.UnreadableError of a row of table
// when it is pgx's failure to decode a column's value (a pgx.ScanArgError,
// naming the column), and err as it is otherwise (no row, a failed query).
func unreadable(runID, table string, err error) error {
	var sae pgx.ScanArgError
	if errors.As(err, &sae) {
		return &wfstore.UnreadableError{RunID: runID, Table: table, Err: err}
	}
	return err
}
