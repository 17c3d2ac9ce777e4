package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// RetryDistribution counts the failed, not published messages by attempts
// (index outbox_failed).
func (s *Store) RetryDistribution(ctx context.Context) ([]store.AttemptsCount, error) {
	out, err := queryAll(ctx, s, `SELECT attempts, count(*) FROM {{prefix}}outbox
		WHERE (status & 32768) <> 0 AND (status & 4) = 0 GROUP BY attempts ORDER BY attempts`, nil,
		func(rows *sql.Rows) (c store.AttemptsCount, err error) {
			err = rows.Scan(&c.Attempts, &c.Count)
			return c, err
		})
	return out, wrap("retry distribution", err)
}

// FailureReasons counts the failed, not published messages by failure
// reason, most frequent first.
func (s *Store) FailureReasons(ctx context.Context) ([]store.ReasonCount, error) {
	out, err := queryAll(ctx, s, `SELECT coalesce(failure_reason, 99) AS reason, count(*) AS n FROM {{prefix}}outbox
		WHERE (status & 32768) <> 0 AND (status & 4) = 0 GROUP BY reason ORDER BY n DESC, reason`, nil,
		func(rows *sql.Rows) (c store.ReasonCount, err error) {
			var r int
			err = rows.Scan(&r, &c.Count)
			c.Reason = errorhandling.FailureReason(r)
			return c, err
		})
	return out, wrap("failure reasons", err)
}

// ScheduledBacklog summarises the live messages due after now (index
// outbox_scheduled).
func (s *Store) ScheduledBacklog(ctx context.Context) (store.Backlog, error) {
	var b store.Backlog
	var next, latest sql.NullInt64
	err := retryBusy(ctx, func() error {
		return s.r.QueryRowContext(ctx, s.sql(`SELECT count(*), min(scheduled_for), max(scheduled_for)
			FROM {{prefix}}outbox
			WHERE scheduled_for IS NOT NULL AND scheduled_for > ? AND dead_lettered_at IS NULL AND (status & 4) = 0`),
			s.now().UnixMilli()).Scan(&b.Count, &next, &latest)
	})
	b.Next, b.Latest = fromMillis(next), fromMillis(latest)
	return b, wrap("scheduled backlog", err)
}

// PoisonCandidates lists the failed messages still retrying (not published,
// not dead-lettered) with at least minAttempts attempts, most attempts
// first, then in seq order; at most store.MaxPoisonCandidates; without
// their payloads.
func (s *Store) PoisonCandidates(ctx context.Context, minAttempts int) ([]*outbox.Message, error) {
	out, err := queryAll(ctx, s, `SELECT `+withoutPayload(messageColumns)+` FROM {{prefix}}outbox
		WHERE attempts >= ? AND (status & 32768) <> 0 AND (status & 4) = 0 AND dead_lettered_at IS NULL
		ORDER BY attempts DESC, seq LIMIT ?`, []any{minAttempts, store.MaxPoisonCandidates},
		func(rows *sql.Rows) (*outbox.Message, error) { return scanShown(rows) })
	return out, wrap("poison candidates", err)
}

// streamHead selects the head of a stream: the first not-published message
// that is live, or dead-lettered and still holding the stream under strict
// ordering (index outbox_stream).
const streamHead = `SELECT stream_released_at, ` + messageColumns + ` FROM {{prefix}}outbox AS m
	WHERE destination = ? AND stream = ? AND (status & 4) = 0
	  AND (dead_lettered_at IS NULL
	    OR (stream_released_at IS NULL AND coalesce(nullif(ordering, ''), {{mode}}) = 'strict'))
	ORDER BY seq LIMIT 1`

// StreamStatus describes one (destination, stream): its head, how many
// messages wait for delivery, and whether and why the head holds them back
// (store.DescribeStream). It reads one consistent snapshot.
func (s *Store) StreamStatus(ctx context.Context, destination, stream string) (*store.StreamStatus, error) {
	st := &store.StreamStatus{Destination: destination, Stream: stream}
	err := retryBusy(ctx, func() error {
		tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
		if err != nil {
			return err
		}
		defer tx.Rollback()
		var released sql.NullInt64
		head, err := scanShown(withLeading{tx.QueryRowContext(ctx, s.sql(streamHead), destination, stream), []any{&released}})
		if errors.Is(err, sql.ErrNoRows) {
			head, err = nil, nil
		}
		if err != nil {
			return err
		}
		const live = `SELECT count(*) FROM {{prefix}}outbox
			WHERE destination = ? AND stream = ? AND (status & 4) = 0 AND dead_lettered_at IS NULL AND seq > ?`
		if err := tx.QueryRowContext(ctx, s.sql(live), destination, stream, 0).Scan(&st.Pending); err != nil {
			return err
		}
		h := store.StreamHead{Message: head, Released: released.Valid}
		if head != nil {
			h.Ordering = s.cfg.EffectiveOrdering(head)
			if err := tx.QueryRowContext(ctx, s.sql(live), destination, stream, head.Seq).Scan(&h.Later); err != nil {
				return err
			}
		}
		store.DescribeStream(st, h, s.now())
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite: stream status %s/%s: %w", destination, stream, err)
	}
	return st, nil
}

// queryAll runs a read-only query on s's read pool and scans every row,
// retrying a busy database from the start.
func queryAll[T any](ctx context.Context, s *Store, query string, args []any, scan func(*sql.Rows) (T, error)) ([]T, error) {
	var out []T
	err := retryBusy(ctx, func() error {
		out = out[:0]
		rows, err := s.r.QueryContext(ctx, s.sql(query), args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			v, err := scan(rows)
			if err != nil {
				return err
			}
			out = append(out, v)
		}
		return rows.Err()
	})
	return out, err
}

func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("sqlite: %s: %w", op, err)
}

// BlockedStreams counts the (destination, stream) pairs in which a strict
// message that waits for its retry, or is dead-lettered, and was not
// released, has at least one undelivered message after it. It is the
// count of Gauges (gaugesSQL), which looks for the later message once per
// stream: its own query looked once per blocking message, through every
// later message of the stream, and took minutes with 100,000 dead letters
// in 50 streams.
func (s *Store) BlockedStreams(ctx context.Context) (int, error) {
	g, err := s.Gauges(ctx, math.MaxInt32)
	if err != nil {
		return 0, fmt.Errorf("sqlite: blocked streams: %w", err)
	}
	return g.BlockedStreams, nil
}
