package wfsqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/backstophq/backstop/workflow/wfstore"
)

// selectOutdated takes the range of the partial index wf_runs_abandoned
// whose leases lapsed before ?1, and looks at each run's tasks by the
// primary key's prefix.
const selectOutdated = `SELECT r.id FROM {{prefix}}wf_runs r
	WHERE r.state = 'running' AND r.lease_expiry < ?1 AND r.created_at < ?1
	  AND r.dag_id IN (SELECT value FROM json_each(?2))
	  AND r.dag_hash || ':' || r.dag_id NOT IN (SELECT value FROM json_each(?3))
	  AND NOT EXISTS (SELECT 1 FROM {{prefix}}wf_tasks t
	                  WHERE t.run_id = r.id AND (t.started_at >= ?1 OR t.ended_at >= ?1))
	ORDER BY r.lease_expiry, r.id LIMIT ?4`

// Outdated implements wfstore.Store.
func (s *Store) Outdated(ctx context.Context, l wfstore.Lease, idle time.Duration, limit int, shapes []string) ([]string, error) {
	dags, err := json.Marshal(wfstore.ShapeDAGs(shapes))
	if err != nil {
		return nil, fmt.Errorf("wfsqlite: outdated runs: %w", err)
	}
	keys, err := json.Marshal(shapes)
	if err != nil {
		return nil, fmt.Errorf("wfsqlite: outdated runs: %w", err)
	}
	rows, err := s.db.QueryContext(ctx, s.q(selectOutdated), l.Now.Add(-idle).UnixMilli(), string(dags), string(keys), limit)
	if err != nil {
		return nil, fmt.Errorf("wfsqlite: outdated runs: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("wfsqlite: outdated runs: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("wfsqlite: outdated runs: %w", err)
	}
	return ids, nil
}
