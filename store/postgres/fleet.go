package postgres

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/backstophq/backstop/store"
)

var (
	_ store.Fleet           = (*Store)(nil)
	_ store.ScheduleRebaser = (*Store)(nil)
	_ store.FleetCounter    = (*Store)(nil)
)

// leaderName is the row of the maintenance leader's lease.
const leaderName = "maintenance"

// Heartbeat records that the instance is alive.
func (s *Store) Heartbeat(ctx context.Context, in store.Instance) error {
	if _, err := s.pool.Exec(ctx, s.sql.heartbeat, s.now(), in.ID, in.Host, int32(in.PID), nullTime(in.StartedAt)); err != nil {
		return fmt.Errorf("postgres: heartbeat: %w", err)
	}
	return nil
}

// ReapDeadInstances declares dead the instances silent for longer than the
// instance timeout, other than self, and releases their leases.
func (s *Store) ReapDeadInstances(ctx context.Context, self string) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, s.sql.deadInstances, s.now(), self, micros(s.cfg.InstanceTimeout)).Scan(&n); err != nil {
		return 0, fmt.Errorf("postgres: reap dead instances: %w", err)
	}
	return n, nil
}

// AcquireLeadership takes the maintenance leadership for instance for
// ttl, or extends it, unless another instance holds it unexpired.
func (s *Store) AcquireLeadership(ctx context.Context, instance string, ttl time.Duration) (bool, error) {
	tag, err := s.pool.Exec(ctx, `INSERT INTO `+s.n.qual+`leader AS l (name, instance, expires_at)
		VALUES ($2, $3, `+nowExpr+` + $4 * interval '1 microsecond')
		ON CONFLICT (name) DO UPDATE SET instance = excluded.instance, expires_at = excluded.expires_at
		WHERE l.instance = excluded.instance OR l.expires_at <= `+nowExpr+`
			-- further ahead than twice the term: set before the clock was
			-- stepped back, by a leader that may be dead
			OR l.expires_at > `+nowExpr+` + 2 * $4 * interval '1 microsecond'`,
		s.now(), leaderName, instance, micros(ttl))
	if err != nil {
		return false, fmt.Errorf("postgres: acquire leadership: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// ResignLeadership ends instance's leadership, if it holds it.
func (s *Store) ResignLeadership(ctx context.Context, instance string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM `+s.n.qual+`leader WHERE name = $1 AND instance = $2`, leaderName, instance); err != nil {
		return fmt.Errorf("postgres: resign leadership: %w", err)
	}
	return nil
}

// SweepBatch deletes at most limit delivered messages kept longer than the
// retention period.
func (s *Store) SweepBatch(ctx context.Context, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM `+s.n.outbox+` WHERE seq = ANY(ARRAY(
		SELECT seq FROM `+s.n.outbox+`
		WHERE published_at IS NOT NULL AND published_at <= `+nowExpr+` - $2 * interval '1 microsecond'
		ORDER BY published_at LIMIT $3))`,
		s.now(), micros(s.cfg.Retention), limit)
	if err != nil {
		return 0, fmt.Errorf("postgres: sweep: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// SweepIdempotencyKeys deletes at most limit idempotency keys older than
// the window, oldest first; see store.Fleet. The window ends the clock's
// steps forward within it later (stepsWithin).
func (s *Store) SweepIdempotencyKeys(ctx context.Context, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM `+s.n.qual+`idempotency_keys WHERE key = ANY(ARRAY(
		SELECT key FROM `+s.n.qual+`idempotency_keys
		WHERE created_at <= `+nowExpr+` - $2 * interval '1 microsecond' - `+s.stepsWithin("$2")+`
		ORDER BY created_at LIMIT $3))`,
		s.now(), micros(s.cfg.IdempotencyWindow), limit)
	if err != nil {
		return 0, fmt.Errorf("postgres: sweep idempotency keys: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// turnCursor is the key of the last turn row a sweep visited; the next
// sweep goes on after it.
type turnCursor struct {
	mu                  sync.Mutex
	destination, stream string
}

// SweepStreamTurns visits at most limit rows of stream_turns in key order,
// from where the last call ended (round again once it reaches the end),
// deletes those whose stream has no row and no undelivered ordered
// message, and returns how many it visited; see store.StreamTurnSweeper.
// A row a writer holds is passed over (SKIP LOCKED), and a writer that
// meets one being deleted waits for this short transaction only. A call
// costs its window whatever the table holds, where a search for rows to
// delete would read the whole table whenever few are deletable (a
// million streams with messages waiting: two million index probes).
func (s *Store) SweepStreamTurns(ctx context.Context, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	s.turns.mu.Lock()
	defer s.turns.mu.Unlock()
	var visited int
	var lastDest, lastStream *string
	err := s.pool.QueryRow(ctx, `WITH v AS (
			SELECT t.destination, t.stream FROM `+s.n.qual+`stream_turns t
			WHERE (t.destination, t.stream) > ($1::text, $2::text)
			ORDER BY t.destination, t.stream LIMIT $3
		), d AS (
			DELETE FROM `+s.n.qual+`stream_turns x WHERE x.ctid = ANY(ARRAY(
				SELECT y.ctid FROM v CROSS JOIN LATERAL (
					SELECT y.ctid FROM `+s.n.qual+`stream_turns y
					WHERE y.destination = v.destination AND y.stream = v.stream
						AND NOT EXISTS (SELECT 1 FROM `+s.n.qual+`streams z
							WHERE z.destination = v.destination AND z.stream = v.stream)
						AND NOT EXISTS (SELECT 1 FROM `+s.n.outbox+` o
							WHERE o.destination = v.destination AND o.stream = v.stream AND o.stream <> ''
								AND o.published_at IS NULL AND o.ordering IS DISTINCT FROM 'none')
					FOR UPDATE SKIP LOCKED) y))
		), last AS (
			SELECT destination, stream FROM v ORDER BY destination DESC, stream DESC LIMIT 1
		)
		SELECT (SELECT count(*) FROM v), (SELECT destination FROM last), (SELECT stream FROM last)`,
		s.turns.destination, s.turns.stream, limit).Scan(&visited, &lastDest, &lastStream)
	if err != nil {
		return 0, fmt.Errorf("postgres: sweep stream turns: %w", err)
	}
	if visited < limit || lastDest == nil {
		s.turns.destination, s.turns.stream = "", "" // round again
	} else {
		s.turns.destination, s.turns.stream = *lastDest, *lastStream
	}
	return visited, nil
}

var _ store.StreamTurnSweeper = (*Store)(nil)

// PendingByDestination counts the undelivered, not dead-lettered
// messages per destination.
func (s *Store) PendingByDestination(ctx context.Context) (map[string]int, error) {
	rows, err := s.pool.Query(ctx, `SELECT destination, count(*) FROM `+s.n.outbox+`
		WHERE published_at IS NULL AND dead_lettered_at IS NULL GROUP BY destination`)
	if err != nil {
		return nil, fmt.Errorf("postgres: pending by destination: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var d string
		var n int64
		if err := rows.Scan(&d, &n); err != nil {
			return nil, fmt.Errorf("postgres: pending by destination: %w", err)
		}
		out[d] = int(n)
	}
	return out, rows.Err()
}

// Circuits returns the shared state of every destination that has one. An
// infinite time, written by hand, is read as NULL and logged once
// (store.CircuitWarnings): pgx cannot scan it into a time.Time, and one
// such row made the whole reading fail.
func (s *Store) Circuits(ctx context.Context) ([]store.Circuit, error) {
	rows, err := s.pool.Query(ctx, `SELECT destination, open, opened_by, opened_at, next_probe, probe_interval, paused_until,
			`+pausedSQL+`,
			open AND `+probeDueSQL+` AND NOT `+pausedSQL+`
		FROM `+s.n.qual+`circuits ORDER BY destination`, s.now(), micros(store.MaxPause))
	if err != nil {
		return nil, fmt.Errorf("postgres: circuits: %w", err)
	}
	defer rows.Close()
	var out []store.Circuit
	for rows.Next() {
		var c store.Circuit
		var openedAt, next, paused pgtype.Timestamptz
		var interval int64
		if err := rows.Scan(&c.Destination, &c.Open, &c.OpenedBy, &openedAt, &next, &interval, &paused, &c.Paused, &c.ProbeDue); err != nil {
			return nil, fmt.Errorf("postgres: circuits: %w", err)
		}
		c.OpenedAt = s.circuitTime(ctx, c.Destination, "opened_at", openedAt)
		c.NextProbe = s.circuitTime(ctx, c.Destination, "next_probe", next)
		c.PausedUntil = s.circuitTime(ctx, c.Destination, "paused_until", paused)
		c.ProbeInterval = store.CircuitInterval(interval, time.Microsecond)
		out = append(out, c)
	}
	return out, rows.Err()
}

// circuitTime is a circuit's time; zero when NULL or, logged, infinite.
// Paused and ProbeDue are decided in SQL, where an infinite time holds
// nothing and makes the probe due.
func (s *Store) circuitTime(ctx context.Context, destination, column string, v pgtype.Timestamptz) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	if v.InfinityModifier != pgtype.Finite {
		s.badCircuits.Warn(ctx, s.cfg.Log(), "postgres", destination, &store.ColumnError{Column: column,
			Value: v.InfinityModifier.String(), Problem: "is not a finite time"}, "read as NULL")
		return time.Time{}
	}
	return v.Time
}

// OpenCircuit opens destination's circuit unless it is open.
func (s *Store) OpenCircuit(ctx context.Context, destination, instance string, firstProbe time.Duration) (bool, error) {
	tag, err := s.pool.Exec(ctx, `INSERT INTO `+s.n.qual+`circuits AS c
			(destination, open, opened_by, opened_at, next_probe, probe_interval)
		VALUES ($2, true, $3, `+nowExpr+`, `+nowExpr+` + $4 * interval '1 microsecond', $4)
		ON CONFLICT (destination) DO UPDATE SET open = true, opened_by = excluded.opened_by, opened_at = excluded.opened_at,
			next_probe = excluded.next_probe, probe_interval = excluded.probe_interval, probe_by = ''
		WHERE NOT c.open`,
		s.now(), destination, instance, micros(firstProbe))
	if err != nil {
		return false, fmt.Errorf("postgres: open circuit %q: %w", destination, err)
	}
	return tag.RowsAffected() == 1, nil
}

// probeDueSQL says whether a circuit's next probe is due at the store's
// now ($1): next_probe was set to the time of setting plus probe_interval,
// so one further ahead than that was set before the clock was stepped
// back, and is due at once rather than after the step. The interval is
// taken at most maxProbeMicros: a larger one, written by hand, is out of
// interval's range, and failed every reading of the circuits.
const probeDueSQL = `coalesce(next_probe <= ` + nowExpr + ` OR next_probe > ` + nowExpr +
	` + least(probe_interval, ` + maxProbeMicros + `) * interval '1 microsecond', true)`

// maxProbeMicros is the longest probe interval (the longest
// time.Duration) in microseconds, as SQL.
const maxProbeMicros = `9223372036854775`

// pausedSQL says whether a pause holds a destination at the store's now
// ($1); $2 is store.MaxPause in microseconds: a pause ending further
// ahead was set before the clock was stepped back, and holds nothing.
const pausedSQL = `coalesce(paused_until > ` + nowExpr + ` AND paused_until <= ` + nowExpr +
	` + $2 * interval '1 microsecond', false)`

// nextIntervalSQL is the probe interval after a probe: twice the
// current one, at least a microsecond and at most the caller's maximum
// ($5), which bounds the current one first: doubling a huge one written by
// hand was out of bigint's range, and no probe could ever be taken.
const nextIntervalSQL = `least(greatest(least(probe_interval, $5) * 2, 1), $5)`

// TakeProbe takes destination's probe token when a probe is due. The
// row's lock serialises instances racing for it: the first moves
// next_probe on, and the others then find no probe due.
func (s *Store) TakeProbe(ctx context.Context, destination, instance string, maxInterval time.Duration) (bool, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE `+s.n.qual+`circuits SET probe_by = $4,
			next_probe = `+nowExpr+` + `+nextIntervalSQL+` * interval '1 microsecond',
			probe_interval = `+nextIntervalSQL+`
		WHERE destination = $3 AND open AND `+probeDueSQL+` AND NOT `+pausedSQL+``,
		s.now(), micros(store.MaxPause), destination, instance, micros(maxInterval))
	if err != nil {
		return false, fmt.Errorf("postgres: take probe %q: %w", destination, err)
	}
	return tag.RowsAffected() == 1, nil
}

// CloseCircuit closes destination's circuit.
func (s *Store) CloseCircuit(ctx context.Context, destination, instance string) error {
	if _, err := s.pool.Exec(ctx, `UPDATE `+s.n.qual+`circuits SET open = false, probe_by = $2 WHERE destination = $1`,
		destination, instance); err != nil {
		return fmt.Errorf("postgres: close circuit %q: %w", destination, err)
	}
	return nil
}

// PauseDestination holds destination for the fleet for d from now. A
// pause that holds nothing (infinite, or further ahead than
// store.MaxPause: set before the clock was stepped back) is replaced, not
// extended: kept as the greater, it held nothing in place of the new one.
func (s *Store) PauseDestination(ctx context.Context, destination string, d time.Duration) error {
	if _, err := s.pool.Exec(ctx, `INSERT INTO `+s.n.qual+`circuits AS c (destination, paused_until)
		VALUES ($2, `+nowExpr+` + $3 * interval '1 microsecond')
		ON CONFLICT (destination) DO UPDATE SET paused_until = greatest(
			CASE WHEN c.paused_until > `+nowExpr+` AND c.paused_until <= `+nowExpr+` + $4 * interval '1 microsecond'
				THEN c.paused_until END,
			excluded.paused_until)`,
		s.now(), destination, micros(min(max(d, 0), store.MaxPause)), micros(store.MaxPause)); err != nil {
		return fmt.Errorf("postgres: pause %q: %w", destination, err)
	}
	return nil
}

// rebaseChunk is the most messages one rebaseSQL statement moves.
const rebaseChunk = 1000

// RebaseSchedules moves the waits scheduled before the clock (the
// database's, or Config.Clock) was stepped back; see
// store.ScheduleRebaser.
func (s *Store) RebaseSchedules(ctx context.Context) (int, error) {
	var now time.Time
	if err := s.pool.QueryRow(ctx, `SELECT `+nowExpr, s.now()).Scan(&now); err != nil {
		return 0, fmt.Errorf("postgres: read the clock: %w", err)
	}
	if !s.steps.Back(now) {
		return 0, nil
	}
	total := 0
	for {
		tag, err := s.pool.Exec(ctx, s.sql.rebase, now, rebaseChunk)
		if err != nil {
			s.steps.Forget()
			return total, fmt.Errorf("postgres: move retries scheduled before the clock went back: %w", err)
		}
		total += int(tag.RowsAffected())
		if tag.RowsAffected() < rebaseChunk {
			return total, nil
		}
	}
}

var _ store.FleetLeaver = (*Store)(nil)

// LeaveFleet deletes instance's row and its waiting registration; see
// store.FleetLeaver.
func (s *Store) LeaveFleet(ctx context.Context, instance string) error {
	if _, err := s.pool.Exec(ctx, `WITH w AS (DELETE FROM `+s.n.qual+`waiters WHERE id = $1)
		DELETE FROM `+s.n.instances+` WHERE id = $1`, instance); err != nil {
		return fmt.Errorf("postgres: leave the fleet: %w", err)
	}
	return nil
}

// LiveInstances counts the instances whose last heart-beat is within the
// instance timeout of now; see store.FleetCounter.
func (s *Store) LiveInstances(ctx context.Context) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM `+s.n.instances+`
		WHERE last_heartbeat >= `+nowExpr+` - $2 * interval '1 microsecond'`,
		s.now(), micros(s.cfg.InstanceTimeout)).Scan(&n); err != nil {
		return 0, fmt.Errorf("postgres: count instances: %w", err)
	}
	return n, nil
}
