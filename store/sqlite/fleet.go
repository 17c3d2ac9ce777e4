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
		WHERE {{prefix}}leader.instance = excluded.instance OR {{prefix}}leader.expires_at <= ?
			-- further ahead than twice the term: set before the clock was
			-- stepped back, by a leader that may be dead
			OR {{prefix}}leader.expires_at > ?`,
		leaderName, instance, now.Add(ttl).UnixMilli(), now.UnixMilli(), now.Add(2*ttl).UnixMilli())
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
// the window, oldest first; see store.Fleet. The window ends the clock's
// steps forward within it later (stepsWithin).
func (s *Store) SweepIdempotencyKeys(ctx context.Context, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	n, err := s.fleetExec(ctx, `DELETE FROM {{prefix}}idempotency_keys WHERE key IN (
		SELECT key FROM {{prefix}}idempotency_keys WHERE created_at <= :now - :window - `+stepsWithin+`
		ORDER BY created_at LIMIT :limit)`,
		sql.Named("now", s.now().UnixMilli()), sql.Named("window", s.cfg.IdempotencyWindow.Milliseconds()),
		sql.Named("limit", limit))
	if err != nil {
		return 0, fmt.Errorf("sqlite: sweep idempotency keys: %w", err)
	}
	return int(n), nil
}

var _ store.FleetLeaver = (*Store)(nil)

// LeaveFleet deletes instance's row; see store.FleetLeaver.
func (s *Store) LeaveFleet(ctx context.Context, instance string) error {
	if _, err := s.fleetExec(ctx, `DELETE FROM {{prefix}}instances WHERE id = ?`, instance); err != nil {
		return fmt.Errorf("sqlite: leave the fleet: %w", err)
	}
	return nil
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

// Circuits returns the shared state of every destination that has one. A
// value written by hand that is not what the column keeps is read as NULL
// (a time) or zero (the interval), and a row without a destination is
// skipped, each logged once (store.CircuitWarnings): one bad row must not
// hide the others.
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
		var dest, open, by, openedAt, next, interval, paused any
		if err := rows.Scan(&dest, &open, &by, &openedAt, &next, &interval, &paused); err != nil {
			return nil, fmt.Errorf("sqlite: circuits: %w", err)
		}
		if c, ok := s.circuit(ctx, now, dest, open, by, openedAt, next, interval, paused); ok {
			out = append(out, c)
		}
	}
	return out, rows.Err()
}

// circuit decodes one row of the circuits table read at now, or reports
// that it has no destination or open flag to go by.
func (s *Store) circuit(ctx context.Context, now time.Time, dest, open, by, openedAt, next, interval, paused any) (store.Circuit, bool) {
	var c store.Circuit
	// The store writes destinations as text. Any other value is another
	// key, which none of its writes matches: a blob spelling "hooks" was
	// read as a second circuit of hooks, which the relays took for the
	// fleet's (the last read wins), and no probe could ever close it.
	name, ok := dest.(string)
	if !ok {
		s.badCircuits.Warn(ctx, s.cfg.Log(), "sqlite", "", &store.ColumnError{Column: "destination", Value: dest,
			Problem: "is not text"}, "row skipped")
		return c, false
	}
	c.Destination = name
	if o, ok := open.(int64); ok && (o == 0 || o == 1) {
		c.Open = o == 1
	} else {
		s.badCircuits.Warn(ctx, s.cfg.Log(), "sqlite", name, &store.ColumnError{Column: "open", Value: open,
			Problem: "is not 0 or 1"}, "row skipped")
		return c, false
	}
	c.OpenedBy = LenientText(by)
	c.OpenedAt = s.circuitTime(ctx, name, "opened_at", openedAt)
	c.NextProbe = s.circuitTime(ctx, name, "next_probe", next)
	c.PausedUntil = s.circuitTime(ctx, name, "paused_until", paused)
	if ms, ok := interval.(int64); ok {
		c.ProbeInterval = store.CircuitInterval(ms, time.Millisecond)
	} else {
		s.badCircuits.Warn(ctx, s.cfg.Log(), "sqlite", name, &store.ColumnError{Column: "probe_interval_ms",
			Value: interval, Problem: "is not an integer"}, "read as 0")
	}
	// A pause or a next probe further ahead than it can have been set
	// was set before the clock was stepped back: it holds nothing.
	c.Paused = c.PausedUntil.After(now) && !c.PausedUntil.After(now.Add(store.MaxPause))
	c.ProbeDue = c.Open && !c.Paused && (!c.NextProbe.After(now) || c.NextProbe.After(now.Add(c.ProbeInterval)))
	return c, true
}

// circuitTime is a circuit's unix-millisecond column as a time; zero when
// NULL or, logged, when it holds anything but an integer.
func (s *Store) circuitTime(ctx context.Context, destination, column string, v any) time.Time {
	switch x := v.(type) {
	case nil:
		return time.Time{}
	case int64:
		return time.UnixMilli(x).UTC()
	}
	s.badCircuits.Warn(ctx, s.cfg.Log(), "sqlite", destination, &store.ColumnError{Column: column, Value: v,
		Problem: "is not unix milliseconds"}, "read as NULL")
	return time.Time{}
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
// due, the pause holds nothing. An open circuit with no next probe (written
// by hand) has one due, as Circuits says: its token could never be taken,
// and the circuit stayed open for the whole fleet for good.
func (s *Store) TakeProbe(ctx context.Context, destination, instance string, maxInterval time.Duration) (bool, error) {
	now := s.now().UnixMilli()
	n, err := s.fleetExec(ctx, `UPDATE {{prefix}}circuits SET probe_by = ?,
			next_probe = ? + min(max(probe_interval_ms * 2, 1), ?),
			probe_interval_ms = min(max(probe_interval_ms * 2, 1), ?)
		WHERE destination = ? AND open = 1 AND coalesce(next_probe <= ? OR next_probe > ? + probe_interval_ms, 1)
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

// PauseDestination holds destination for the fleet for d from now. A
// pause that holds nothing (not unix milliseconds, or further ahead than
// store.MaxPause: set before the clock was stepped back) is replaced, not
// extended: kept as the greater, it held nothing in place of the new one.
func (s *Store) PauseDestination(ctx context.Context, destination string, d time.Duration) error {
	now := s.now()
	until := now.Add(min(max(d, 0), store.MaxPause)).UnixMilli()
	if _, err := s.fleetExec(ctx, `INSERT INTO {{prefix}}circuits (destination, paused_until) VALUES (?, ?)
		ON CONFLICT (destination) DO UPDATE SET paused_until = CASE
			WHEN typeof({{prefix}}circuits.paused_until) = 'integer'
				AND {{prefix}}circuits.paused_until > ? AND {{prefix}}circuits.paused_until <= ?
			THEN max({{prefix}}circuits.paused_until, excluded.paused_until)
			ELSE excluded.paused_until END`,
		destination, until, now.UnixMilli(), now.Add(store.MaxPause).UnixMilli()); err != nil {
		return fmt.Errorf("sqlite: pause %q: %w", destination, err)
	}
	return nil
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

var _ store.ScheduleRebaser = (*Store)(nil)

// rebaseChunk is the most messages one statement of RebaseSchedules moves.
const rebaseChunk = 1000

// RebaseSchedules moves the waits scheduled before the store's clock was
// stepped back; see store.ScheduleRebaser. Rows whose times are not
// integers in the range of a time are the quarantine's, and left to it.
func (s *Store) RebaseSchedules(ctx context.Context) (int, error) {
	now := s.now()
	if !s.steps.Back(now) {
		return 0, nil
	}
	ms := now.UnixMilli()
	total := 0
	for {
		n, err := s.fleetExec(ctx, `UPDATE {{prefix}}outbox SET scheduled_for = ? + (scheduled_for - last_failed_at), last_failed_at = ?
			WHERE seq IN (SELECT seq FROM {{prefix}}outbox
				WHERE published_at IS NULL AND dead_lettered_at IS NULL AND instance_id IS NULL
					AND scheduled_for > ? AND last_failed_at > ?
					AND typeof(scheduled_for) = 'integer' AND typeof(last_failed_at) = 'integer'
					AND scheduled_for BETWEEN `+millisRange+` AND last_failed_at BETWEEN `+millisRange+`
				ORDER BY scheduled_for LIMIT ?)`, ms, ms, ms, ms+1000, rebaseChunk)
		total += int(n)
		if err != nil {
			s.steps.Forget()
			return total, fmt.Errorf("sqlite: move retries scheduled before the clock went back: %w", err)
		}
		if n < rebaseChunk {
			return total, nil
		}
	}
}

var _ store.FleetCounter = (*Store)(nil)

// LiveInstances counts the instances whose last heart-beat is within the
// instance timeout of now; see store.FleetCounter.
func (s *Store) LiveInstances(ctx context.Context) (int, error) {
	var n int
	err := retryBusy(ctx, func() error {
		return s.r.QueryRowContext(ctx, s.sql(`SELECT count(*) FROM {{prefix}}instances WHERE last_heartbeat >= ?`),
			s.now().Add(-s.cfg.InstanceTimeout).UnixMilli()).Scan(&n)
	})
	return n, wrap("count instances", err)
}
