package sqlite

import (
	"context"
	"database/sql"

	"github.com/backstophq/backstop/store"
)

// gaugesSQL reads every store-wide gauge in one statement, so one
// snapshot, with count queries only: no payload or headers is read.
// Parameters: ?1 the store's now in milliseconds, ?2 the least attempts of
// a poison candidate, ?3 when a lease has lapsed (lapseAt). The index that serves each count is named beside it.
// The blocked-streams count (which BlockedStreams returns) finds the
// blocking messages through indexes: those waiting for a later try
// by outbox_scheduled, the dead-lettered ones through their dead-letter
// entries, since every dead-lettered row has an entry that is not replayed
// (a failure, DeadLetter and the quarantine each add one; a replay resets
// the row; deleting the last entry deletes the row); the later live
// message is looked for once per stream, after its first blocking message
// (a later one after any is after the first), not once per blocking
// message.
const gaugesSQL = `SELECT
	-- dead_letters_pending
	(SELECT count(*) FROM {{prefix}}dead_letters WHERE status = 'pending'),
	(SELECT min(failure_time) FROM {{prefix}}dead_letters WHERE status = 'pending'),
	-- outbox_scheduled
	(SELECT count(*) FROM {{prefix}}outbox
		WHERE scheduled_for IS NOT NULL AND scheduled_for > ?1 AND dead_lettered_at IS NULL AND (status & 4) = 0),
	-- outbox_failed
	(SELECT count(*) FROM {{prefix}}outbox
		WHERE attempts >= ?2 AND (status & 32768) <> 0 AND (status & 4) = 0 AND dead_lettered_at IS NULL),
	-- the streams' blocking messages: waiting ones by outbox_scheduled,
	-- dead-lettered ones through their entries (dead_letters_message, the
	-- outbox's id index); the later message by outbox_stream
	(SELECT count(*) FROM (
		SELECT m.destination, m.stream, min(m.seq) AS seq FROM (
			SELECT destination, stream, seq, ordering, stream_released_at, status FROM {{prefix}}outbox
			WHERE scheduled_for IS NOT NULL AND scheduled_for > ?1 AND dead_lettered_at IS NULL AND stream <> ''
			UNION ALL
			SELECT destination, stream, seq, ordering, stream_released_at, status FROM {{prefix}}outbox
			WHERE dead_lettered_at IS NOT NULL AND stream <> '' AND id IN (
				SELECT message_id FROM {{prefix}}dead_letters WHERE message_id <> '' AND replayed = 0)) AS m
		WHERE (m.status & 4) = 0 AND m.stream <> '' AND m.stream_released_at IS NULL
		  AND coalesce(nullif(m.ordering, ''), {{mode}}) = 'strict'
		GROUP BY m.destination, m.stream) AS f
		WHERE EXISTS (SELECT 1 FROM {{prefix}}outbox AS l
			WHERE l.destination = f.destination AND l.stream = f.stream AND l.seq > f.seq
			  AND (l.status & 4) = 0 AND l.dead_lettered_at IS NULL)),
	-- outbox_lease
	(SELECT count(*) FROM {{prefix}}outbox
		WHERE instance_id IS NOT NULL AND lease_expiry > ?3 AND (status & 4) = 0)`

// Gauges reads the store-wide gauges in one statement (store.Gauger):
// counts over the partial indexes, never a payload.
func (s *Store) Gauges(ctx context.Context, poisonMinAttempts int) (store.Gauges, error) {
	var (
		g      store.Gauges
		oldest sql.NullInt64
	)
	now := s.now()
	lapse, err := s.lapseAt(ctx, s.r, now)
	if err != nil {
		return store.Gauges{}, wrap("gauges", err)
	}
	err = retryBusy(ctx, func() error {
		return s.r.QueryRowContext(ctx, s.sql(gaugesSQL), now.UnixMilli(), poisonMinAttempts, lapse).
			Scan(&g.DLQPending, &oldest, &g.Scheduled, &g.PoisonCandidates, &g.BlockedStreams, &g.Leased)
	})
	if err != nil {
		return store.Gauges{}, wrap("gauges", err)
	}
	g.OldestDLQ = fromMillis(oldest)
	return g, nil
}
