package wfpostgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop/workflow/wfstore"
)

// selectOutdated takes the range of the partial index
// wf_runs_abandoned_idx whose leases lapsed before the time in $1 (NULL:
// the database's) less $2 microseconds, and looks at each run's tasks by
// the primary key's prefix.
const selectOutdated = `WITH b AS (SELECT coalesce($1::timestamptz, now()) - $2::bigint * interval '1 microsecond' AS before)
	SELECT r.id FROM {{T}}wf_runs r, b
	WHERE r.state = 'running' AND r.lease_expiry < b.before AND r.created_at < b.before
	  AND r.dag_id = ANY($3::text[]) AND NOT (r.dag_hash || ':' || r.dag_id = ANY($4::text[]))
	  AND NOT EXISTS (SELECT 1 FROM {{T}}wf_tasks t
	                  WHERE t.run_id = r.id AND (t.started_at >= b.before OR t.ended_at >= b.before))
	ORDER BY r.lease_expiry, r.id LIMIT $5`

// Outdated implements wfstore.Store.
func (s *Store) Outdated(ctx context.Context, l wfstore.Lease, idle time.Duration, limit int, shapes []string) ([]string, error) {
	if shapes == nil {
		shapes = []string{}
	}
	rows, err := s.pool.Query(ctx, s.q(selectOutdated), s.leaseNow(l.Now), idle.Microseconds(),
		wfstore.ShapeDAGs(shapes), shapes, limit)
	if err != nil {
		return nil, fmt.Errorf("wfpostgres: outdated runs: %w", classify(err))
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("wfpostgres: outdated runs: %w", classify(err))
	}
	return ids, nil
}
