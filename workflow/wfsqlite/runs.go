package wfsqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/backstophq/backstop/workflow/models"
	"github.com/backstophq/backstop/workflow/wfstore"
)

const (
	insertRun = `INSERT INTO {{prefix}}wf_runs (id, dag_id, dag_hash, state, input, owner, lease_expiry, created_at,
		upstream) VALUES (?, ?, ?, 'running', ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING`
	insertTask = `INSERT INTO {{prefix}}wf_tasks (run_id, task_id, state) VALUES (?, ?, 'pending')`

	// acquireRun takes a running run nobody holds, whose lease lapsed, or
	// that the caller holds (by primary key).
	acquireRun = `UPDATE {{prefix}}wf_runs SET owner = ?, lease_expiry = ?
		WHERE id = ? AND state = 'running' AND (owner IS NULL OR owner = ? OR lease_expiry < ?)`
	renewRun = `UPDATE {{prefix}}wf_runs SET lease_expiry = ?
		WHERE id = ? AND state = 'running' AND owner = ?`
	// releaseRun leaves the lease lapsed a millisecond before the release,
	// not at 0: Outdated reads from it when the run was last held.
	releaseRun = `UPDATE {{prefix}}wf_runs SET owner = NULL, lease_expiry = ?
		WHERE id = ? AND state = 'running' AND owner = ?`
	endRun = `UPDATE {{prefix}}wf_runs SET state = ?, reason = ?, ended_at = ?, owner = NULL, lease_expiry = 0
		WHERE id = ? AND state = 'running' AND owner = ?`
	runState = `SELECT state, coalesce(owner, ''), lease_expiry FROM {{prefix}}wf_runs WHERE id = ?`

	// selectAbandoned is served by the partial index wf_runs_abandoned
	// (two ranges of it: lapsed, and stamped before a clock step back).
	selectAbandoned = `SELECT id, lease_expiry > ?2 FROM {{prefix}}wf_runs
		WHERE state = 'running' AND (lease_expiry < ?1 OR (lease_expiry > ?2 AND owner IS NOT NULL))
		  AND (?3 OR dag_hash || ':' || dag_id IN (SELECT value FROM json_each(?4)))
		ORDER BY lease_expiry, id LIMIT ?5`
	// rebaseRun moves a lease taken before a clock step back to one lease
	// from now, by primary key.
	rebaseRun = `UPDATE {{prefix}}wf_runs SET lease_expiry = ?
		WHERE id = ? AND state = 'running' AND owner IS NOT NULL AND lease_expiry > ?`

	// postponeRun is by primary key; the new lease_expiry moves the run
	// within wf_runs_abandoned.
	postponeRun = `UPDATE {{prefix}}wf_runs SET owner = NULL, lease_expiry = ?
		WHERE id = ? AND state = 'running' AND (owner IS NULL OR lease_expiry < ?)`

	// The three steps of Reopen, by primary key and, for the dependents,
	// within one run's rows.
	reopenTask = `UPDATE {{prefix}}wf_tasks SET state = 'pending', failures = 0, dead_letter = '', replay_of = ?,
		reason = ?, cause = '', error = '', next_attempt_at = NULL
		WHERE run_id = ? AND task_id = ? AND state = 'failed' AND dead_letter = ?
		  AND EXISTS (SELECT 1 FROM {{prefix}}wf_runs WHERE id = ? AND state <> 'running')`
	reopenDependents = `UPDATE {{prefix}}wf_tasks SET state = 'pending', reason = '', cause = '',
		replay_of = CASE WHEN dead_letter <> '' THEN dead_letter ELSE replay_of END, dead_letter = ''
		WHERE run_id = ? AND cause = ? AND state IN ('upstream_failed', 'skipped')`
	reopenRun = `UPDATE {{prefix}}wf_runs SET state = 'running', reason = '', ended_at = NULL, owner = ?, lease_expiry = ?
		WHERE id = ?`
)

// CreateRun implements wfstore.Store.
func (s *Store) CreateRun(ctx context.Context, run *wfstore.Run, tasks []string, l wfstore.Lease) error {
	var lease int64
	if l.Owner != "" {
		lease = l.Expiry().UnixMilli()
	}
	if err := wfstore.CheckRun(run, tasks); err != nil {
		return fmt.Errorf("wfsqlite: create run: %w", err)
	}
	up, err := wfstore.EncodeUpstream(run.Upstream)
	if err != nil {
		return fmt.Errorf("wfsqlite: create run %q: %w", run.ID, err)
	}
	return s.tx(ctx, func(tx *sql.Tx) error {
		n, err := affected(tx.ExecContext(ctx, s.q(insertRun), run.ID, run.DAGID, run.DAGHash, run.Input,
			nullString(l.Owner), lease, l.Now.UnixMilli(), up))
		if err != nil {
			return fmt.Errorf("wfsqlite: create run %q: %w", run.ID, err)
		}
		if n == 0 {
			return fmt.Errorf("%w: %s", wfstore.ErrRunExists, run.ID)
		}
		for _, id := range tasks {
			if _, err := tx.ExecContext(ctx, s.q(insertTask), run.ID, id); err != nil {
				return fmt.Errorf("wfsqlite: create task %q of run %q: %w", id, run.ID, err)
			}
		}
		return nil
	})
}

// AcquireRun implements wfstore.Store.
func (s *Store) AcquireRun(ctx context.Context, runID string, l wfstore.Lease) error {
	n, err := s.exec(ctx, acquireRun, l.Owner, l.Expiry().UnixMilli(), runID, l.Owner, l.Now.UnixMilli())
	if err != nil {
		return fmt.Errorf("wfsqlite: acquire run %q: %w", runID, err)
	}
	if n == 1 {
		return nil
	}
	return s.whyNotHeld(ctx, runID, wfstore.ErrLeased)
}

// whyNotHeld explains why a change that needs a running run failed:
// ErrNotFound, ErrRunEnded, or otherwise held (the error given).
func (s *Store) whyNotHeld(ctx context.Context, runID string, held error) error {
	var state, owner string
	var expiry int64
	err := s.db.QueryRowContext(ctx, s.q(runState), runID).Scan(&state, &owner, &expiry)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("%w: %s", wfstore.ErrNotFound, runID)
	case err != nil:
		return fmt.Errorf("wfsqlite: run %q: %w", runID, err)
	case models.RunState(state) != models.RunStateRunning:
		return fmt.Errorf("%w: run %q is %s", wfstore.ErrRunEnded, runID, state)
	}
	return fmt.Errorf("%w: run %q is held by %q until %s", held, runID, owner,
		time.UnixMilli(expiry).UTC().Format(time.RFC3339Nano))
}

// RenewRun implements wfstore.Store.
func (s *Store) RenewRun(ctx context.Context, runID string, l wfstore.Lease) error {
	n, err := s.exec(ctx, renewRun, l.Expiry().UnixMilli(), runID, l.Owner)
	if err != nil {
		return fmt.Errorf("wfsqlite: renew run %q: %w", runID, err)
	}
	if n == 0 {
		return s.whyNotHeld(ctx, runID, wfstore.ErrLeaseLost)
	}
	return nil
}

// ReleaseRun implements wfstore.Store.
func (s *Store) ReleaseRun(ctx context.Context, runID string, l wfstore.Lease) error {
	if _, err := s.exec(ctx, releaseRun, l.Now.UnixMilli()-1, runID, l.Owner); err != nil {
		return fmt.Errorf("wfsqlite: release run %q: %w", runID, err)
	}
	return nil
}

// EndRun implements wfstore.Store.
func (s *Store) EndRun(ctx context.Context, runID string, l wfstore.Lease, state models.RunState, reason string) (bool, error) {
	n, err := s.exec(ctx, endRun, string(state), reason, l.Now.UnixMilli(), runID, l.Owner)
	if err != nil {
		return false, fmt.Errorf("wfsqlite: end run %q: %w", runID, err)
	}
	return n == 1, nil
}

// Abandoned implements wfstore.Store.
func (s *Store) Abandoned(ctx context.Context, l wfstore.Lease, limit int, shapes []string) ([]string, error) {
	list, err := json.Marshal(shapes)
	if err != nil {
		return nil, fmt.Errorf("wfsqlite: abandoned runs: %w", err)
	}
	rows, err := s.db.QueryContext(ctx, s.q(selectAbandoned), l.Now.UnixMilli(), stepLimit(l), shapes == nil, string(list), limit)
	if err != nil {
		return nil, fmt.Errorf("wfsqlite: abandoned runs: %w", err)
	}
	var ids, stepped []string
	for rows.Next() {
		var id string
		var ahead bool
		if err := rows.Scan(&id, &ahead); err != nil {
			rows.Close()
			return nil, err
		}
		if ahead {
			stepped = append(stepped, id)
		} else {
			ids = append(ids, id)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("wfsqlite: abandoned runs: %w", err)
	}
	for _, id := range stepped {
		if _, err := s.exec(ctx, rebaseRun, l.Expiry().UnixMilli(), id, stepLimit(l)); err != nil {
			return nil, fmt.Errorf("wfsqlite: abandoned runs: rebase the lease of run %q: %w", id, err)
		}
	}
	return ids, nil
}

// stepLimit is the latest live lease expiry as of l, in unix
// milliseconds (wfstore.Lease.StepLimit); the largest one without a limit.
func stepLimit(l wfstore.Lease) int64 {
	if d := l.StepLimit(); d > 0 {
		return l.Now.Add(d).UnixMilli()
	}
	return math.MaxInt64
}

// PostponeRun implements wfstore.Store.
func (s *Store) PostponeRun(ctx context.Context, runID string, now time.Time, d time.Duration) error {
	if _, err := s.exec(ctx, postponeRun, now.Add(d).UnixMilli(), runID, now.UnixMilli()); err != nil {
		return fmt.Errorf("wfsqlite: postpone run %q: %w", runID, err)
	}
	return nil
}

// Reopen implements wfstore.Store.
func (s *Store) Reopen(ctx context.Context, r *wfstore.Reopen) error {
	return s.tx(ctx, func(tx *sql.Tx) error {
		n, err := affected(tx.ExecContext(ctx, s.q(reopenTask), r.EntryID, r.Reason, r.RunID, r.TaskID, r.EntryID, r.RunID))
		if err != nil {
			return fmt.Errorf("wfsqlite: reopen %s/%s: %w", r.RunID, r.TaskID, err)
		}
		if n == 0 {
			return fmt.Errorf("%w: run %q has not ended, or task %q is not failed with dead letter %s",
				wfstore.ErrConflict, r.RunID, r.TaskID, r.EntryID)
		}
		if _, err := tx.ExecContext(ctx, s.q(reopenDependents), r.RunID, r.TaskID); err != nil {
			return fmt.Errorf("wfsqlite: reopen dependents of %s/%s: %w", r.RunID, r.TaskID, err)
		}
		if _, err := tx.ExecContext(ctx, s.q(reopenRun), r.Lease.Owner, r.Lease.Expiry().UnixMilli(), r.RunID); err != nil {
			return fmt.Errorf("wfsqlite: reopen run %q: %w", r.RunID, err)
		}
		return nil
	})
}
