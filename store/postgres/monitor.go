package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// failedWhere selects the undelivered messages with StatusFailed; it is
// the predicate of outbox_failed_idx.
const failedWhere = `published_at IS NULL AND status & 32768 <> 0`

// byIndexSQL makes the planner of the transaction it runs in read through
// indexes, in one process, without compiling. The planner has no
// statistics of the failure bit, takes its test for one nearly every row
// matches, and read the whole outbox in parallel for FailureReasons (1.0 s
// behind 5,000,000 ready messages, none failed, on every GET /v1/stats);
// once failed messages are few, their index is the way to them, and when
// they are many it reads no more than they are.
const byIndexSQL = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true),
	set_config('jit', 'off', true), set_config('max_parallel_workers_per_gather', '0', true)`

// RetryDistribution counts the undelivered failed messages by attempts,
// fewest attempts first.
func (s *Store) RetryDistribution(ctx context.Context) ([]store.AttemptsCount, error) {
	rows, err := s.pool.Query(ctx, `SELECT attempts, count(*) FROM `+s.n.outbox+`
		WHERE `+failedWhere+` GROUP BY attempts ORDER BY attempts`)
	if err != nil {
		return nil, fmt.Errorf("postgres: retry distribution: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.AttemptsCount, error) {
		var c store.AttemptsCount
		return c, r.Scan(&c.Attempts, &c.Count)
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: retry distribution: %w", err)
	}
	return out, nil
}

// FailureReasons counts the undelivered failed messages by failure
// reason, most frequent first.
func (s *Store) FailureReasons(ctx context.Context) ([]store.ReasonCount, error) {
	var out []store.ReasonCount
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, byIndexSQL); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, s.failureReasonsSQL())
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.ReasonCount, error) {
			var c store.ReasonCount
			var reason int32
			err := r.Scan(&reason, &c.Count)
			c.Reason = errorhandling.FailureReason(reason)
			return c, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: failure reasons: %w", err)
	}
	return out, nil
}

// failureReasonsSQL is FailureReasons' statement.
func (s *Store) failureReasonsSQL() string {
	return `SELECT coalesce(failure_reason, 99), count(*) AS n FROM ` + s.n.outbox + `
		WHERE ` + failedWhere + ` GROUP BY 1 ORDER BY n DESC, 1`
}

// ScheduledBacklog summarises the undelivered, not dead-lettered messages
// due after now.
func (s *Store) ScheduledBacklog(ctx context.Context) (store.Backlog, error) {
	var (
		b            store.Backlog
		next, latest pgtype.Timestamptz
	)
	err := s.pool.QueryRow(ctx, s.scheduledBacklogSQL(), s.now()).Scan(&b.Count, &next, &latest)
	if err != nil {
		return b, fmt.Errorf("postgres: scheduled backlog: %w", err)
	}
	b.Next, b.Latest = clampedTime(next), clampedTime(latest)
	return b, nil
}

// scheduledBacklogSQL is ScheduledBacklog's statement ($1 the time, NULL
// for the database's). It reads the messages not leased through
// outbox_due_idx and the leased ones through outbox_lease_idx: as one
// condition it read the whole outbox (1.1 s behind 5,000,000 ready
// messages, on every GET /v1/stats the dashboard makes).
func (s *Store) scheduledBacklogSQL() string {
	return `SELECT coalesce(sum(n), 0)::bigint, min(lo), max(hi) FROM (
		SELECT count(*) AS n, min(scheduled_for) AS lo, max(scheduled_for) AS hi FROM ` + s.n.outbox + `
		WHERE published_at IS NULL AND dead_lettered_at IS NULL AND instance_id IS NULL
			AND scheduled_for IS NOT NULL AND scheduled_for > ` + nowExpr + `
		UNION ALL
		SELECT count(*), min(scheduled_for), max(scheduled_for) FROM ` + s.n.outbox + `
		WHERE instance_id IS NOT NULL AND published_at IS NULL AND dead_lettered_at IS NULL
			AND scheduled_for > ` + nowExpr + `) x`
}

// clampedTime is t within what a message can carry (outbox.MinTime,
// MaxTime), zero when NULL: a row plain SQL scheduled for the year 10000
// or infinity counts in the backlog, and shows as the latest time there is.
func clampedTime(t pgtype.Timestamptz) time.Time {
	switch {
	case !t.Valid:
		return time.Time{}
	case t.InfinityModifier == pgtype.Infinity, t.Time.After(outbox.MaxTime):
		return outbox.MaxTime
	case t.InfinityModifier == pgtype.NegativeInfinity, t.Time.Before(outbox.MinTime):
		return outbox.MinTime
	}
	return t.Time.UTC()
}

// PoisonCandidates lists the undelivered, not dead-lettered failed
// messages with at least minAttempts attempts, most attempts first, then
// oldest first; at most store.MaxPoisonCandidates; without their payloads.
func (s *Store) PoisonCandidates(ctx context.Context, minAttempts int) ([]*outbox.Message, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+withoutPayload(msgCols)+` FROM `+s.n.outbox+`
		WHERE `+failedWhere+` AND dead_lettered_at IS NULL AND attempts >= $1
		ORDER BY attempts DESC, seq LIMIT $2`, minAttempts, store.MaxPoisonCandidates)
	if err != nil {
		return nil, fmt.Errorf("postgres: poison candidates: %w", err)
	}
	out, err := collectMessages(rows)
	if err != nil {
		return nil, fmt.Errorf("postgres: poison candidates: %w", err)
	}
	return out, nil
}

// StreamStatus describes one stream: its head (the earliest undelivered
// message that is not dead-lettered, or is and still holds the stream),
// how many messages are pending, and in words why it is or is not
// blocked (store.DescribeStream).
func (s *Store) StreamStatus(ctx context.Context, destination, stream string) (*store.StreamStatus, error) {
	st := &store.StreamStatus{Destination: destination, Stream: stream}
	destMode := string(s.cfg.PolicyFor(destination).Ordering)
	inStream := `destination = $1 AND stream = $2 AND published_at IS NULL`
	if stream != "" {
		inStream += ` AND stream <> ''` // lets outbox_stream_idx serve it
	}
	var (
		head     store.StreamHead
		released bool
	)
	row := s.pool.QueryRow(ctx, `SELECT `+msgCols+`, stream_released_at IS NOT NULL FROM `+s.n.outbox+`
		WHERE `+inStream+` AND (dead_lettered_at IS NULL OR
			(coalesce(ordering, $3) = 'strict' AND stream_released_at IS NULL))
		ORDER BY seq LIMIT 1`, destination, stream, destMode)
	m, err := scanShown(extraColumn{row, &released})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return nil, fmt.Errorf("postgres: stream status: %w", err)
	default:
		head = store.StreamHead{Message: m, Ordering: s.cfg.EffectiveOrdering(m), Released: released}
	}
	var headSeq int64
	if m != nil {
		headSeq = m.Seq
	}
	var now time.Time
	err = s.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE seq > $3),
		coalesce($4::timestamptz, now()) FROM `+s.n.outbox+`
		WHERE `+inStream+` AND dead_lettered_at IS NULL`, destination, stream, headSeq, s.now()).
		Scan(&st.Pending, &head.Later, &now)
	if err != nil {
		return nil, fmt.Errorf("postgres: stream status: %w", err)
	}
	store.DescribeStream(st, head, now)
	return st, nil
}

// extraColumn scans a row of msgCols followed by one more column.
type extraColumn struct {
	row   pgx.Row
	extra any
}

func (e extraColumn) Scan(dest ...any) error {
	return e.row.Scan(append(dest, e.extra)...)
}

// BlockedStreams counts the (destination, stream) pairs in which a strict
// message that waits for its retry, or is dead-lettered, and was not
// released, has at least one undelivered message after it. It is the
// blocked-streams count of Gauges, which finds the blocking messages
// through indexes instead of reading the outbox.
func (s *Store) BlockedStreams(ctx context.Context) (int, error) {
	g, err := s.Gauges(ctx, math.MaxInt32)
	if err != nil {
		return 0, fmt.Errorf("postgres: blocked streams: %w", err)
	}
	return g.BlockedStreams, nil
}

// modeOfParams is modeOf with the policy arrays and default mode at
// parameters $first, $first+1 and $first+2.
func modeOfParams(alias string, first int) string {
	return fmt.Sprintf(`coalesce(($%d::text[])[array_position($%d::text[], %s.destination)], $%d::text)`,
		first+1, first, alias, first+2)
}
