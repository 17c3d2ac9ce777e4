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

// Leases are judged on the database's clock, as the outbox's are: each
// instance's own clock could be ahead of the others' (or jump), and an
// instance whose clock ran ahead would take over runs that another still
// drives, running their tasks twice at once. The engine's clock (Lease.Now)
// is used only when the outbox store has a clock of its own (tests); see
// leaseNow. leaseUntil2 and leaseUntil6 are a lease's expiry from the time
// in $2 or $6 (NULL: the database's) and the TTL in $4 or $9, in
// microseconds.
const (
	leaseUntil2 = `coalesce($2::timestamptz, now()) + $4::bigint * interval '1 microsecond'`
	leaseUntil6 = `coalesce($6::timestamptz, now()) + $9::bigint * interval '1 microsecond'`
	// stepLimit4 is the latest live lease expiry from the time in $1 and
	// the limit in $4 (wfstore.Lease.StepLimit; NULL: none).
	stepLimit4 = `coalesce($1::timestamptz, now()) + $4::bigint * interval '1 microsecond'`
)

const (
	insertRun = `INSERT INTO {{T}}wf_runs (id, dag_id, dag_hash, state, input, owner, lease_expiry, created_at,
		upstream) VALUES ($1, $2, $3, 'running', $4, $5,
			CASE WHEN $5::text IS NULL THEN '-infinity'::timestamptz ELSE ` + leaseUntil6 + ` END, $7, $8::jsonb)
		ON CONFLICT (id) DO NOTHING`
	insertTasks = `INSERT INTO {{T}}wf_tasks (run_id, task_id, state)
		SELECT $1, t, 'pending' FROM unnest($2::text[]) AS t`

	// acquireRun takes a running run nobody holds, whose lease lapsed, or
	// that the caller holds (by primary key; the row lock orders it with
	// the fenced changes that lock the run).
	acquireRun = `UPDATE {{T}}wf_runs SET owner = $1, lease_expiry = ` + leaseUntil2 + `
		WHERE id = $3 AND state = 'running' AND (owner IS NULL OR owner = $1 OR lease_expiry < coalesce($2::timestamptz, now()))`
	renewRun = `UPDATE {{T}}wf_runs SET lease_expiry = coalesce($1::timestamptz, now()) + $4::bigint * interval '1 microsecond'
		WHERE id = $2 AND state = 'running' AND owner = $3`
	// releaseRun leaves the lease lapsed a microsecond before the release
	// (the time in $3; NULL: the database's), not at -infinity: Outdated
	// reads from it when the run was last held.
	releaseRun = `UPDATE {{T}}wf_runs SET owner = NULL,
		lease_expiry = coalesce($3::timestamptz, now()) - interval '1 microsecond'
		WHERE id = $1 AND state = 'running' AND owner = $2`
	endRun = `UPDATE {{T}}wf_runs SET state = $1, reason = $2, ended_at = $3, owner = NULL, lease_expiry = '-infinity'
		WHERE id = $4 AND state = 'running' AND owner = $5`
	runState = `SELECT state, coalesce(owner, ''), nullif(lease_expiry, '-infinity') FROM {{T}}wf_runs WHERE id = $1`

	// selectAbandoned is served by the partial index wf_runs_abandoned_idx.
	selectAbandoned = `SELECT id, coalesce(lease_expiry > ` + stepLimit4 + `, false) FROM {{T}}wf_runs
		WHERE state = 'running' AND (lease_expiry < coalesce($1::timestamptz, now())
		    OR (lease_expiry > ` + stepLimit4 + ` AND owner IS NOT NULL))
		  AND ($3::text[] IS NULL OR dag_hash || ':' || dag_id = ANY($3::text[]))
		ORDER BY lease_expiry, id LIMIT $2`
	// rebaseRun moves a lease taken before a clock step back to one lease
	// from now, by primary key.
	rebaseRun = `UPDATE {{T}}wf_runs SET lease_expiry = coalesce($1::timestamptz, now()) + $2::bigint * interval '1 microsecond'
		WHERE id = $3 AND state = 'running' AND owner IS NOT NULL
		  AND lease_expiry > coalesce($1::timestamptz, now()) + $4::bigint * interval '1 microsecond'`

	// postponeRun is by primary key; the new lease_expiry moves the run
	// within wf_runs_abandoned_idx.
	postponeRun = `UPDATE {{T}}wf_runs SET owner = NULL,
		lease_expiry = coalesce($2::timestamptz, now()) + $3::bigint * interval '1 microsecond'
		WHERE id = $1 AND state = 'running' AND (owner IS NULL OR lease_expiry < coalesce($2::timestamptz, now()))`

	// The steps of Reopen: lock the run, then by primary key and, for the
	// dependents, within one run's rows.
	lockEndedRun = `SELECT 1 FROM {{T}}wf_runs WHERE id = $1 AND state <> 'running' FOR UPDATE`
	reopenTask   = `UPDATE {{T}}wf_tasks SET state = 'pending', failures = 0, dead_letter = '', replay_of = $1,
		reason = $2, cause = '', error = '', next_attempt_at = NULL
		WHERE run_id = $3 AND task_id = $4 AND state = 'failed' AND dead_letter = $1`
	reopenDependents = `UPDATE {{T}}wf_tasks SET state = 'pending', reason = '', cause = '',
		replay_of = CASE WHEN dead_letter <> '' THEN dead_letter ELSE replay_of END, dead_letter = ''
		WHERE run_id = $1 AND cause = $2 AND state IN ('upstream_failed', 'skipped')`
	reopenRun = `UPDATE {{T}}wf_runs SET state = 'running', reason = '', ended_at = NULL, owner = $1,
		lease_expiry = ` + leaseUntil2 + ` WHERE id = $3`
)

// CreateRun implements wfstore.Store.
func (s *Store) CreateRun(ctx context.Context, run *wfstore.Run, tasks []string, l wfstore.Lease) error {
	if err := wfstore.CheckRun(run, tasks); err != nil {
		return fmt.Errorf("wfpostgres: create run: %w", err)
	}
	up, err := wfstore.EncodeUpstream(run.Upstream)
	if err != nil {
		return fmt.Errorf("wfpostgres: create run %q: %w", run.ID, err)
	}
	return s.tx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, s.q(insertRun), run.ID, run.DAGID, run.DAGHash, run.Input, nullString(l.Owner), s.leaseNow(l.Now), l.Now, up,
			l.TTL.Microseconds())
		if err != nil {
			return fmt.Errorf("wfpostgres: create run %q: %w", run.ID, err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("%w: %s", wfstore.ErrRunExists, run.ID)
		}
		if _, err := tx.Exec(ctx, s.q(insertTasks), run.ID, tasks); err != nil {
			return fmt.Errorf("wfpostgres: create the tasks of run %q: %w", run.ID, err)
		}
		return nil
	})
}

// AcquireRun implements wfstore.Store.
func (s *Store) AcquireRun(ctx context.Context, runID string, l wfstore.Lease) error {
	n, err := s.exec(ctx, acquireRun, l.Owner, s.leaseNow(l.Now), runID, l.TTL.Microseconds())
	if err != nil {
		return fmt.Errorf("wfpostgres: acquire run %q: %w", runID, err)
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
	var expiry *time.Time
	err := s.pool.QueryRow(ctx, s.q(runState), runID).Scan(&state, &owner, &expiry)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: %s", wfstore.ErrNotFound, runID)
	case err != nil:
		return fmt.Errorf("wfpostgres: run %q: %w", runID, err)
	case models.RunState(state) != models.RunStateRunning:
		return fmt.Errorf("%w: run %q is %s", wfstore.ErrRunEnded, runID, state)
	}
	return fmt.Errorf("%w: run %q is held by %q until %s", held, runID, owner,
		fromTs(expiry).Format(time.RFC3339Nano))
}

// RenewRun implements wfstore.Store.
func (s *Store) RenewRun(ctx context.Context, runID string, l wfstore.Lease) error {
	n, err := s.exec(ctx, renewRun, s.leaseNow(l.Now), runID, l.Owner, l.TTL.Microseconds())
	if err != nil {
		return fmt.Errorf("wfpostgres: renew run %q: %w", runID, err)
	}
	if n == 0 {
		return s.whyNotHeld(ctx, runID, wfstore.ErrLeaseLost)
	}
	return nil
}

// ReleaseRun implements wfstore.Store.
func (s *Store) ReleaseRun(ctx context.Context, runID string, l wfstore.Lease) error {
	if _, err := s.exec(ctx, releaseRun, runID, l.Owner, s.leaseNow(l.Now)); err != nil {
		return fmt.Errorf("wfpostgres: release run %q: %w", runID, err)
	}
	return nil
}

// EndRun implements wfstore.Store.
func (s *Store) EndRun(ctx context.Context, runID string, l wfstore.Lease, state models.RunState, reason string) (bool, error) {
	n, err := s.exec(ctx, endRun, string(state), reason, l.Now, runID, l.Owner)
	if err != nil {
		return false, fmt.Errorf("wfpostgres: end run %q: %w", runID, err)
	}
	return n == 1, nil
}

// Abandoned implements wfstore.Store.
func (s *Store) Abandoned(ctx context.Context, l wfstore.Lease, limit int, shapes []string) ([]string, error) {
	now, limitUS := s.leaseNow(l.Now), stepLimit(l)
	rows, err := s.pool.Query(ctx, s.q(selectAbandoned), now, limit, shapes, limitUS)
	if err != nil {
		return nil, fmt.Errorf("wfpostgres: abandoned runs: %w", err)
	}
	var ids, stepped []string
	var id string
	var ahead bool
	if _, err := pgx.ForEachRow(rows, []any{&id, &ahead}, func() error {
		if ahead {
			stepped = append(stepped, id)
		} else {
			ids = append(ids, id)
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("wfpostgres: abandoned runs: %w", err)
	}
	for _, id := range stepped {
		if _, err := s.exec(ctx, rebaseRun, now, l.TTL.Microseconds(), id, limitUS); err != nil {
			return nil, fmt.Errorf("wfpostgres: abandoned runs: rebase the lease of run %q: %w", id, err)
		}
	}
	return ids, nil
}

// stepLimit is wfstore.Lease.StepLimit in microseconds, or nil (no
// limit: the comparison with NULL takes nothing).
func stepLimit(l wfstore.Lease) *int64 {
	if d := l.StepLimit(); d > 0 {
		us := d.Microseconds()
		return &us
	}
	return nil
}

// PostponeRun implements wfstore.Store.
func (s *Store) PostponeRun(ctx context.Context, runID string, now time.Time, d time.Duration) error {
	if _, err := s.exec(ctx, postponeRun, runID, s.leaseNow(now), d.Microseconds()); err != nil {
		return fmt.Errorf("wfpostgres: postpone run %q: %w", runID, err)
	}
	return nil
}

// Reopen implements wfstore.Store.
func (s *Store) Reopen(ctx context.Context, r *wfstore.Reopen) error {
	conflict := fmt.Errorf("%w: run %q has not ended, or task %q is not failed with dead letter %s",
		wfstore.ErrConflict, r.RunID, r.TaskID, r.EntryID)
	return s.tx(ctx, func(tx pgx.Tx) error {
		var one int
		err := tx.QueryRow(ctx, s.q(lockEndedRun), r.RunID).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return conflict
		}
		if err != nil {
			return fmt.Errorf("wfpostgres: reopen run %q: %w", r.RunID, err)
		}
		tag, err := tx.Exec(ctx, s.q(reopenTask), r.EntryID, r.Reason, r.RunID, r.TaskID)
		if err != nil {
			return fmt.Errorf("wfpostgres: reopen %s/%s: %w", r.RunID, r.TaskID, err)
		}
		if tag.RowsAffected() == 0 {
			return conflict
		}
		if _, err := tx.Exec(ctx, s.q(reopenDependents), r.RunID, r.TaskID); err != nil {
			return fmt.Errorf("wfpostgres: reopen dependents of %s/%s: %w", r.RunID, r.TaskID, err)
		}
		if _, err := tx.Exec(ctx, s.q(reopenRun), r.Lease.Owner, s.leaseNow(r.Lease.Now), r.RunID,
			r.Lease.TTL.Microseconds()); err != nil {
			return fmt.Errorf("wfpostgres: reopen run %q: %w", r.RunID, err)
		}
		return nil
	})
}

// leaseNow is the time a lease is judged at: nil, the database's clock,
// unless the outbox store runs on a clock of its own (store.Config.Clock,
// for tests), whose readings the engine's clock then stands for.
func (s *Store) leaseNow(t time.Time) *time.Time {
	if s.st.Config().Clock == nil {
		return nil
	}
	return &t
}
