package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/backstophq/backstop/store"
)

// gaugesSQL reads every store-wide gauge in one statement, so one round
// trip and one snapshot, with count queries only: no payload or headers
// is read. Parameters: $1 the store's now (NULL: the database's), $2 and
// $3 the policies' destinations and ordering modes, $4 the default mode,
// $5 the least attempts of a poison candidate. The index that serves each
// count is named beside it.
//
// The scheduled count is split on instance_id so that each half is served
// by a partial index: unleased rows by outbox_due_idx, leased rows (the
// messages in flight) by outbox_lease_idx. Together they are
// ScheduledBacklog's rows. The blocked-streams count is BlockedStreams's
// (monitor.go) with the blocking messages found through indexes: those
// waiting for a later try as above, and the dead-lettered ones by
// outbox_dead_idx; the later live message is looked for once per stream,
// after its first blocking message (it was once per blocking message:
// 150,000 probes at 1M rows).
// BlockedStreams's own query reads the whole outbox on a large backlog.
// The conformance suite checks that both agree.
const gaugesSQL = `SELECT
	-- dead_letters_pending_idx
	(SELECT count(*) FROM {dl} WHERE status = 'pending'),
	(SELECT min(failure_time) FROM {dl} WHERE status = 'pending'),
	-- outbox_due_idx
	(SELECT count(*) FROM {o}
		WHERE published_at IS NULL AND dead_lettered_at IS NULL AND instance_id IS NULL
		  AND scheduled_for IS NOT NULL AND scheduled_for > {now})
	-- outbox_lease_idx
	+ (SELECT count(*) FROM {o}
		WHERE instance_id IS NOT NULL AND published_at IS NULL AND dead_lettered_at IS NULL
		  AND scheduled_for > {now}),
	-- outbox_failed_idx
	(SELECT count(*) FROM {o}
		WHERE published_at IS NULL AND status & 32768 <> 0 AND dead_lettered_at IS NULL AND attempts >= $5),
	-- the streams' blocking messages by the same indexes as above, and the
	-- dead-lettered ones by outbox_dead_idx; only the first of each
	-- stream needs the later message (outbox_stream_idx), since a later
	-- live message after any blocking one is after the first
	(SELECT count(*) FROM (
		SELECT b.destination, b.stream, min(b.seq) AS seq FROM (
			SELECT destination, stream, seq, ordering, stream_released_at FROM {o}
			WHERE published_at IS NULL AND dead_lettered_at IS NULL AND instance_id IS NULL
			  AND scheduled_for IS NOT NULL AND scheduled_for > {now}
			UNION ALL
			SELECT destination, stream, seq, ordering, stream_released_at FROM {o}
			WHERE instance_id IS NOT NULL AND published_at IS NULL AND dead_lettered_at IS NULL
			  AND scheduled_for > {now}
			UNION ALL
			SELECT destination, stream, seq, ordering, stream_released_at FROM {o}
			WHERE dead_lettered_at IS NOT NULL AND published_at IS NULL) AS b
		WHERE b.stream <> '' AND b.stream_released_at IS NULL
		  AND coalesce(b.ordering, {mode}) = 'strict'
		GROUP BY b.destination, b.stream) AS f
		WHERE EXISTS (SELECT 1 FROM {o} AS l
			WHERE l.destination = f.destination AND l.stream = f.stream AND l.stream <> '' AND l.seq > f.seq
			  AND l.published_at IS NULL AND l.dead_lettered_at IS NULL)),
	-- outbox_lease_idx
	(SELECT count(*) FROM {o}
		WHERE instance_id IS NOT NULL AND published_at IS NULL AND lease_expiry > {lapse})`

// Gauges reads the store-wide gauges in one statement (store.Gauger):
// counts over the partial indexes, never a payload.
func (s *Store) Gauges(ctx context.Context, poisonMinAttempts int) (store.Gauges, error) {
	var (
		g      store.Gauges
		oldest *time.Time
	)
	err := s.pool.QueryRow(ctx, s.gaugesSQL(), s.now(), s.policyDests, s.policyModes,
		string(s.cfg.DefaultPolicy.Ordering), poisonMinAttempts).
		Scan(&g.DLQPending, &oldest, &g.Scheduled, &g.PoisonCandidates, &g.BlockedStreams, &g.Leased)
	if err != nil {
		return store.Gauges{}, fmt.Errorf("postgres: gauges: %w", err)
	}
	g.OldestDLQ = derefTime(oldest)
	return g, nil
}

// gaugesSQL is gaugesSQL with the store's table names.
func (s *Store) gaugesSQL() string {
	return strings.NewReplacer("{dl}", s.n.deadLetters, "{o}", s.n.outbox, "{now}", nowExpr,
		"{lapse}", s.lapseAt(nowExpr), "{mode}", modeOfParams("b", 2)).Replace(gaugesSQL)
}
