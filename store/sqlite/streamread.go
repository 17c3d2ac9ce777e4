package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"slices"
)

// A stream's read (migration 0014). A stream is walked from its head
// (readStream, walkStream); one that holds many parked messages (dead-
// lettered or waiting for a retry, not leased) that do not hold it is
// read by readStreamIndexed, through four partial indexes that split its
// undelivered messages, so that those are never read: a release stream
// with 200,000 dead letters before its live messages costs a claim what
// it takes, not the dead letters.
//
//   - streamProbe finds, with one index descent each: the head (the
//     first undelivered message, parked or not, so that a replay or a
//     retry coming due is read again); the first parked message that
//     holds the stream (strict, not released past), where the read
//     stops; the earliest due time of the retries not due yet, which
//     wakes the stream; whether any retry is due.
//   - streamLive reads what is not parked (outbox_stream_live, and the
//     parked-looking messages under a lease, outbox_stream_inflight),
//     from the head, up to there.
//   - streamDue gives the parked retries due now, which are claimable.
//
// Every statement of a read passes its values to the WHERE clause as
// (SELECT :name), which SQLite's planner does not look into. Given a
// bound value it may, once ANALYZE has written sqlite_stat4 (an
// application's own ANALYZE or PRAGMA optimize), use it to estimate the
// rows, and then prepares the statement again each time the value
// changes: for every stream of every claim. The index is forced (INDEXED
// BY) and the plan cannot change. BenchmarkBatchSizeOverStreams after
// ANALYZE, 4,096 a batch: 146-168 CPU us a message before, 94-101 after
// (256 a batch: 179-192, 122-125); most of a stream read was preparing.

const (
	// streamParkedHold is outbox_stream_hold's predicate.
	streamParkedHold = `(status & 4) = 0 AND stream <> '' AND instance_id IS NULL AND stream_released_at IS NULL
  AND coalesce(ordering, '') IN ('', 'strict')
  AND (dead_lettered_at IS NOT NULL OR scheduled_for IS NOT NULL)`

	// streamHolder is the first parked message of ordering (its value
	// follows: '' for the destination's) that holds the stream:
	// dead-lettered, or a retry not due yet.
	streamHolder = `SELECT seq FROM {{prefix}}outbox INDEXED BY {{prefix}}outbox_stream_hold
  WHERE destination = (SELECT :dest) AND stream = (SELECT :stream) AND seq >= (SELECT :head) AND ` + streamParkedHold + `
    AND (dead_lettered_at IS NOT NULL OR scheduled_for > :now) AND coalesce(ordering, '') = `

	// streamProbe is, in one statement (a stream read costs two or three
	// where it cost one; the probes are an index descent each): the
	// stream's head (its first undelivered message); the first holder of
	// ordering strict and, when :strict, of the destination's ordering;
	// the earliest due time not come yet; whether a retry is due.
	streamProbe = `SELECT
  (SELECT seq FROM {{prefix}}outbox INDEXED BY {{prefix}}outbox_stream
    WHERE destination = (SELECT :dest) AND stream = (SELECT :stream) AND (status & 4) = 0 AND seq >= (SELECT :head)
    ORDER BY seq LIMIT 1),
  (` + streamHolder + `'strict' ORDER BY seq LIMIT 1),
  (` + streamHolder + `'' AND :strict ORDER BY seq LIMIT 1),
  (SELECT scheduled_for FROM {{prefix}}outbox INDEXED BY {{prefix}}outbox_stream_retry
    WHERE destination = (SELECT :dest) AND stream = (SELECT :stream) AND scheduled_for > (SELECT :now) AND ` + streamParkedRetry + `
    ORDER BY scheduled_for LIMIT 1),
  EXISTS (SELECT 1 FROM {{prefix}}outbox INDEXED BY {{prefix}}outbox_stream_retry
    WHERE destination = (SELECT :dest) AND stream = (SELECT :stream) AND scheduled_for <= (SELECT :now) AND ` + streamParkedRetry + `)`

	// streamLive reads a stream's messages that are not parked, from its
	// head, in seq order, up to :stop: those neither dead-lettered nor
	// scheduled (outbox_stream_live) merged with the dead-lettered or
	// scheduled ones under a lease, live or lapsed (outbox_stream_inflight).
	streamLive = `SELECT seq, ord, leased, lease_expiry, dead, scheduled_for, released FROM (
  SELECT seq, coalesce(ordering, '') AS ord, instance_id IS NOT NULL AND coalesce(lease_expiry, 0) > :lapse AS leased,
    lease_expiry, dead_lettered_at IS NOT NULL AS dead, scheduled_for, stream_released_at IS NOT NULL AS released
  FROM {{prefix}}outbox INDEXED BY {{prefix}}outbox_stream_live
  WHERE destination = (SELECT :dest) AND stream = (SELECT :stream) AND seq >= (SELECT :head) AND seq < (SELECT :stop)
    AND (status & 4) = 0 AND stream <> '' AND coalesce(ordering, '') <> 'none'
    AND dead_lettered_at IS NULL AND scheduled_for IS NULL
  UNION ALL
  SELECT seq, coalesce(ordering, ''), instance_id IS NOT NULL AND coalesce(lease_expiry, 0) > :lapse,
    lease_expiry, dead_lettered_at IS NOT NULL, scheduled_for, stream_released_at IS NOT NULL
  FROM {{prefix}}outbox INDEXED BY {{prefix}}outbox_stream_inflight
  WHERE destination = (SELECT :dest) AND stream = (SELECT :stream) AND seq >= (SELECT :head) AND seq < (SELECT :stop)
    AND (status & 4) = 0 AND stream <> '' AND coalesce(ordering, '') <> 'none'
    AND instance_id IS NOT NULL AND (dead_lettered_at IS NOT NULL OR scheduled_for IS NOT NULL))
ORDER BY seq`

	// streamParkedRetry is outbox_stream_retry's predicate.
	streamParkedRetry = `(status & 4) = 0 AND stream <> '' AND coalesce(ordering, '') <> 'none'
  AND instance_id IS NULL AND dead_lettered_at IS NULL AND scheduled_for IS NOT NULL`

	// streamDue are a stream's parked retries due now, before :stop,
	// longest due first, at most dueReadCap of them.
	streamDue = `SELECT seq FROM {{prefix}}outbox INDEXED BY {{prefix}}outbox_stream_retry
WHERE destination = (SELECT :dest) AND stream = (SELECT :stream) AND scheduled_for <= (SELECT :now) AND seq >= (SELECT :head) AND seq < (SELECT :stop)
  AND ` + streamParkedRetry + `
ORDER BY scheduled_for LIMIT :cap`
)

// walkParkedCap is how many messages a stream's walk passes over before it
// gives up for readStreamIndexed; below 0, streams are read by
// readStreamIndexed alone (a test reads every stream that way).
var walkParkedCap = 64

// streamRows is a stream from its head, in seq order (outbox_stream):
// what walkStream reads.
const streamRows = `SELECT seq, coalesce(ordering, ''), instance_id IS NOT NULL AND coalesce(lease_expiry, 0) > :lapse,
  lease_expiry, dead_lettered_at IS NOT NULL, scheduled_for, stream_released_at IS NOT NULL
FROM {{prefix}}outbox INDEXED BY {{prefix}}outbox_stream
WHERE destination = (SELECT :dest) AND stream = (SELECT :stream) AND (status & 4) = 0 AND seq >= (SELECT :head)
ORDER BY seq`

// readStream reads h from head: claimable messages, up to limit, in seq
// order, until the first that holds back the rest (a leased one; under
// strict ordering one waiting for its retry or dead-lettered, unless the
// stream was released past it). It walks the stream from its head, one
// statement, which is what nearly every stream needs; a stream whose walk
// passes over more than walkParkedCap messages that do not hold it
// (parked ones, messages of ordering none) is read again by
// readStreamIndexed, which never reads them. The indexed read alone made
// every stream cost several statements: claims over 10,000 shallow strict
// streams took 1.4-2.5x as long.
func (s *Store) readStream(ctx context.Context, tx *sql.Tx, h *headStream, head int64, mode string, limit int, at claimAt) error {
	if walkParkedCap < 0 {
		return s.readStreamIndexed(ctx, tx, h, head, mode, limit, at)
	}
	first, wait, more, had := h.first, h.wait, h.more, len(h.cands)
	done, err := s.walkStream(ctx, tx, h, head, mode, limit, at)
	if err != nil || done {
		return err
	}
	h.first, h.wait, h.more, h.cands = first, wait, more, h.cands[:had]
	return s.readStreamIndexed(ctx, tx, h, head, mode, limit, at)
}

// walkStream is readStream's walk. It reports false, with h changed, when
// it passed over walkParkedCap messages without reaching the end of what
// it may take.
func (s *Store) walkStream(ctx context.Context, tx *sql.Tx, h *headStream, head int64, mode string, limit int, at claimAt) (bool, error) {
	rows, err := s.queryCached(ctx, tx, streamRows, sql.Named("dest", h.dest), sql.Named("stream", h.key),
		sql.Named("lapse", at.lapse), sql.Named("head", head))
	if err != nil {
		return false, fmt.Errorf("read stream %s/%s: %w", h.dest, h.key, err)
	}
	defer rows.Close()
	passed := 0
	for rows.Next() {
		var r streamRow
		if err := r.scan(rows); err != nil {
			return false, err
		}
		if r.ordering != "none" && h.first == 0 {
			h.first = r.seq
		}
		switch r.verdict(h, mode, at) {
		case rowStop:
			return true, rows.Err()
		case rowPass:
			if passed++; passed > walkParkedCap {
				return false, rows.Err()
			}
		case rowTake:
			if len(h.cands) >= limit {
				h.more = true
				return true, rows.Err()
			}
			h.cands = append(h.cands, r.seq)
		}
	}
	return true, rows.Err()
}

// streamRow is a row of a stream read (streamRows, streamLive).
type streamRow struct {
	seq                       int64
	ordering                  string // the message's own; '' for the destination's
	leased, dead, released    bool   // leased: a live lease
	leaseExpiry, scheduledFor sql.NullInt64
}

func (r *streamRow) scan(rows *sql.Rows) error {
	return rows.Scan(&r.seq, &r.ordering, &r.leased, &r.leaseExpiry, &r.dead, &r.scheduledFor, &r.released)
}

// rowVerdict is what a stream read does with a row.
type rowVerdict int

const (
	rowTake rowVerdict = iota // claimable
	rowPass                   // does not hold the stream: read on
	rowStop                   // holds back the rest of the stream
)

// verdict says what a read of h under the destination's ordering mode does
// with r at at: a leased message holds the stream unless its ordering is
// none; a dead letter or a retry not due yet holds it under strict
// ordering unless the stream was released past it; a message of ordering
// none is claimed through its own index. A lease (or the lease hold, when
// later) or a retry not due yet also gives h the time that wakes it.
func (r *streamRow) verdict(h *headStream, mode string, at claimAt) rowVerdict {
	if r.ordering == "none" {
		return rowPass
	}
	m := r.ordering
	if m == "" {
		m = mode
	}
	holds := m == "strict" && !r.released
	switch {
	case r.leased:
		wake := r.leaseExpiry
		if wake.Valid && at.hold > wake.Int64 {
			wake.Int64 = at.hold
		}
		h.soonest(wake)
		if m == "none" {
			return rowPass
		}
		return rowStop
	case r.dead, r.scheduledFor.Valid && r.scheduledFor.Int64 > at.now:
		if !r.dead {
			h.soonest(r.scheduledFor)
		}
		if holds {
			return rowStop
		}
		return rowPass
	}
	return rowTake
}

// dueReadCap bounds the due retries one stream read takes in: more than
// that many due at once in one stream are claimed longest due first, and
// the stream stays ready for the rest.
const dueReadCap = 1000

// readStreamIndexed reads h from head: claimable messages, up to limit, in seq
// order, until the first that holds back the rest (a leased one; under
// strict ordering one waiting for its retry or dead-lettered, unless the
// stream was released past it). Parked messages that do not hold the
// stream are passed over without being read; the first of them stays the
// head and the earliest due time among them wakes the stream.
func (s *Store) readStreamIndexed(ctx context.Context, tx *sql.Tx, h *headStream, head int64, mode string, limit int, at claimAt) error {
	args := []any{sql.Named("dest", h.dest), sql.Named("stream", h.key), sql.Named("head", head), sql.Named("now", at.now)}
	var (
		first, holdStrict, holdMode, wait sql.NullInt64
		anyDue                            bool
	)
	err := s.queryRowCached(ctx, tx, streamProbe, append(args, sql.Named("strict", mode == "strict"))...).
		Scan(&first, &holdStrict, &holdMode, &wait, &anyDue)
	if err != nil {
		return fmt.Errorf("read stream %s/%s: %w", h.dest, h.key, err)
	}
	if !first.Valid {
		return nil // nothing undelivered from head
	}
	if h.first == 0 {
		h.first = first.Int64
	}
	stop := int64(math.MaxInt64)
	for _, at := range []sql.NullInt64{holdStrict, holdMode} {
		if at.Valid {
			stop = min(stop, at.Int64)
		}
	}
	h.soonest(wait)
	args = append(args, sql.Named("stop", stop))
	var due []int64
	if anyDue {
		due, err = s.int64s(ctx, tx, streamDue, append(args, sql.Named("cap", dueReadCap))...)
		if err != nil {
			return fmt.Errorf("read stream %s/%s: %w", h.dest, h.key, err)
		}
		if len(due) == dueReadCap {
			h.more = true
		}
		slices.Sort(due)
	}
	// take adds seq, or says the limit is reached.
	take := func(seq int64) bool {
		if len(h.cands) >= limit {
			h.more = true
			return false
		}
		h.cands = append(h.cands, seq)
		return true
	}
	rows, err := s.queryCached(ctx, tx, streamLive, append(args, sql.Named("lapse", at.lapse))...)
	if err != nil {
		return fmt.Errorf("read stream %s/%s: %w", h.dest, h.key, err)
	}
	defer rows.Close()
	for rows.Next() {
		var r streamRow
		if err := r.scan(rows); err != nil {
			return err
		}
		for len(due) > 0 && due[0] < r.seq {
			if !take(due[0]) {
				return rows.Err()
			}
			due = due[1:]
		}
		switch r.verdict(h, mode, at) {
		case rowStop:
			return rows.Err()
		case rowTake:
			if !take(r.seq) {
				return rows.Err()
			}
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, q := range due {
		if !take(q) {
			break
		}
	}
	return nil
}
