package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/backstophq/backstop/store"
)

var _ store.Fleet = (*Store)(nil)

// leaderName is the row of the maintenance leader's lease.
const leaderName = "maintenance"

// Heartbeat records that the instance is alive.
func (s *Store) Heartbeat(ctx context.Context, in store.Instance) error {
	err := s.write(ctx, func(tx *sql.Tx) error {
		return s.heartbeat(ctx, tx, &store.Batch{Instance: in}, nil, s.now())
	})
	if err != nil {
		return fmt.Errorf("sqlite: heartbeat: %w", err)
	}
	return nil
}

// ReapDeadInstances declares dead the instances silent for longer than the
// instance timeout, other than self, and releases their leases.
func (s *Store) ReapDeadInstances(ctx context.Context, self string) (int, error) {
	var n int
	err := s.write(ctx, func(tx *sql.Tx) error {
		res := &store.Result{}
		if err := s.buryDeadInstances(ctx, tx, &store.Batch{Instance: store.Instance{ID: self}}, res, s.now()); err != nil {
			return err
		}
		n = res.DeadInstances
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("sqlite: reap dead instances: %w", err)
	}
	return n, nil
}

// AcquireLeadership takes the maintenance leadership for instance for
// ttl, or extends it, unless another instance holds it unexpired.
func (s *Store) AcquireLeadership(ctx context.Context, instance string, ttl time.Duration) (bool, error) {
	now := s.now()
	n, err := s.fleetExec(ctx, `INSERT INTO {{prefix}}leader (name, instance, expires_at) VALUES (?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET instance = excluded.instance, expires_at = excluded.expires_at
		WHERE {{prefix}}leader.instance = excluded.instance OR {{prefix}}leader.expires_at <= ?`,
		leaderName, instance, now.Add(ttl).UnixMilli(), now.UnixMilli())
	if err != nil {
		return false, fmt.Errorf("sqlite: acquire leadership: %w", err)
	}
	return n == 1, nil
}

// ResignLeadership ends instance's leadership, if it holds it.
func (s *Store) ResignLeadership(ctx context.Context, instance string) error {
	if _, err := s.fleetExec(ctx, `DELETE FROM {{prefix}}leader WHERE name = ? AND instance = ?`, leaderName, instance); err != nil {
		return fmt.Errorf("sqlite: resign leadership: %w", err)
	}
	return nil
}

// SweepBatch deletes at most limit delivered messages kept longer than the
// retention period.
func (s *Store) SweepBatch(ctx context.Context, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	n, err := s.fleetExec(ctx, `DELETE FROM {{prefix}}outbox WHERE seq IN (
		SELECT seq FROM {{prefix}}outbox WHERE published_at IS NOT NULL AND published_at <= ? ORDER BY seq LIMIT ?)`,
		s.now().Add(-s.cfg.Retention).UnixMilli(), limit)
	if err != nil {
		return 0, fmt.Errorf("sqlite: sweep: %w", err)
	}
	return int(n), nil
}

// SweepIdempotencyKeys deletes at most limit idempotency keys older than
// the window, oldest first; see store.Fleet.
func (s *Store) SweepIdempotencyKeys(ctx context.Context, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	n, err := s.fleetExec(ctx, `DELETE FROM {{prefix}}idempotency_keys WHERE key IN (
		SELECT key FROM {{prefix}}idempotency_keys WHERE created_at <= ? ORDER BY created_at LIMIT ?)`,
		s.now().Add(-s.cfg.IdempotencyWindow).UnixMilli(), limit)
	if err != nil {
		return 0, fmt.Errorf("sqlite: sweep idempotency keys: %w", err)
	}
	return int(n), nil
}

// PendingByDestination counts the undelivered, not dead-lettered
// messages per destination.
func (s *Store) PendingByDestination(ctx context.Context) (map[string]int, error) {
	rows, err := s.r.QueryContext(ctx, s.sql(`SELECT destination, count(*) FROM {{prefix}}outbox
		WHERE published_at IS NULL AND dead_lettered_at IS NULL GROUP BY destination`))
	if err != nil {
		return nil, fmt.Errorf("sqlite: pending by destination: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var d string
		var n int
		if err := rows.Scan(&d, &n); err != nil {
			return nil, fmt.Errorf("sqlite: pending by destination: %w", err)
		}
		out[d] = n
	}
	return out, rows.Err()
}

// Circuits returns the shared state of every destination that has one.
func (s *Store) Circuits(ctx context.Context) ([]store.Circuit, error) {
	now := s.now()
	rows, err := s.r.QueryContext(ctx, s.sql(`SELECT destination, open, opened_by, opened_at, next_probe,
		probe_interval_ms, paused_until FROM {{prefix}}circuits ORDER BY destination`))
	if err != nil {
		return nil, fmt.Errorf("sqlite: circuits: %w", err)
	}
	defer rows.Close()
	var out []store.Circuit
	for rows.Next() {
		var c store.Circuit
		var open int
		var openedAt, next, paused sql.NullInt64
		var interval int64
		if err := rows.Scan(&c.Destination, &open, &c.OpenedBy, &openedAt, &next, &interval, &paused); err != nil {
			return nil, fmt.Errorf("sqlite: circuits: %w", err)
		}
		c.Open = open == 1
		c.OpenedAt, c.NextProbe, c.PausedUntil = millisTime(openedAt), millisTime(next), millisTime(paused)
		c.ProbeInterval = time.Duration(interval) * time.Millisecond
		// A pause or a next probe further ahead than it can have been set
		// was set before the clock was stepped back: it holds nothing.
		c.Paused = c.PausedUntil.After(now) && !c.PausedUntil.After(now.Add(store.MaxPause))
		c.ProbeDue = c.Open && !c.Paused && (!c.NextProbe.After(now) || c.NextProbe.After(now.Add(c.ProbeInterval)))
		out = append(out, c)
	}
	return out, rows.Err()
}

// OpenCircuit opens destination's circuit unless it is open.
func (s *Store) OpenCircuit(ctx context.Context, destination, instance string, firstProbe time.Duration) (bool, error) {
	now := s.now()
	n, err := s.fleetExec(ctx, `INSERT INTO {{prefix}}circuits (destination, open, opened_by, opened_at, next_probe, probe_interval_ms)
		VALUES (?, 1, ?, ?, ?, ?)
		ON CONFLICT (destination) DO UPDATE SET open = 1, opened_by = excluded.opened_by, opened_at = excluded.opened_at,
			next_probe = excluded.next_probe, probe_interval_ms = excluded.probe_interval_ms, probe_by = ''
		WHERE {{prefix}}circuits.open = 0`,
		destination, instance, now.UnixMilli(), now.Add(firstProbe).UnixMilli(), firstProbe.Milliseconds())
	if err != nil {
		return false, fmt.Errorf("sqlite: open circuit %q: %w", destination, err)
	}
	return n == 1, nil
}

// TakeProbe takes destination's probe token when a probe is due. A next
// probe further ahead than its interval, or a pause further ahead than
// store.MaxPause, was set before the clock was stepped back: the probe is
// due, the pause holds nothing.
func (s *Store) TakeProbe(ctx context.Context, destination, instance string, maxInterval time.Duration) (bool, error) {
	now := s.now().UnixMilli()
	n, err := s.fleetExec(ctx, `UPDATE {{prefix}}circuits SET probe_by = ?,
			next_probe = ? + min(max(probe_interval_ms * 2, 1), ?),
			probe_interval_ms = min(max(probe_interval_ms * 2, 1), ?)
		WHERE destination = ? AND open = 1 AND (next_probe <= ? OR next_probe > ? + probe_interval_ms)
			AND NOT coalesce(paused_until > ? AND paused_until <= ?, 0)`,
		instance, now, maxInterval.Milliseconds(), maxInterval.Milliseconds(), destination, now, now,
		now, now+store.MaxPause.Milliseconds())
	if err != nil {
		return false, fmt.Errorf("sqlite: take probe %q: %w", destination, err)
	}
	return n == 1, nil
}

// CloseCircuit closes destination's circuit.
func (s *Store) CloseCircuit(ctx context.Context, destination, instance string) error {
	if _, err := s.fleetExec(ctx, `UPDATE {{prefix}}circuits SET open = 0, probe_by = ? WHERE destination = ?`,
		instance, destination); err != nil {
		return fmt.Errorf("sqlite: close circuit %q: %w", destination, err)
	}
	return nil
}

// PauseDestination holds destination for the fleet for d from now.
func (s *Store) PauseDestination(ctx context.Context, destination string, d time.Duration) error {
	until := s.now().Add(min(max(d, 0), store.MaxPause)).UnixMilli()
	if _, err := s.fleetExec(ctx, `INSERT INTO {{prefix}}circuits (destination, paused_until) VALUES (?, ?)
		ON CONFLICT (destination) DO UPDATE SET paused_until = max(coalesce({{prefix}}circuits.paused_until, 0), excluded.paused_until)`,
		destination, until); err != nil {
		return fmt.Errorf("sqlite: pause %q: %w", destination, err)
	}
	return nil
}

// millisTime is a nullable unix-millisecond column as a time; zero when
// NULL.
func millisTime(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return time.UnixMilli(v.Int64).UTC()
}

// fleetExec runs one statement in a write transaction and returns the
// rows it changed.
func (s *Store) fleetExec(ctx context.Context, query string, args ...any) (int64, error) {
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.sql(query), args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}
