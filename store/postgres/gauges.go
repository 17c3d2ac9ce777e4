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
// query (monitor.go); the conformance suite checks they agree.
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
	-- outbox_failed_idx or outbox_due_idx for the heads, outbox_stream_idx for the probe
	(SELECT count(*) FROM (
		SELECT DISTINCT b.destination, b.stream FROM {o} AS b
		WHERE b.published_at IS NULL AND b.stream <> '' AND b.stream_released_at IS NULL
		  AND (b.dead_lettered_at IS NOT NULL OR b.scheduled_for > {now})
		  AND coalesce(b.ordering, {mode}) = 'strict'
		  AND EXISTS (SELECT 1 FROM {o} AS l
			WHERE l.destination = b.destination AND l.stream = b.stream AND l.seq > b.seq
			  AND l.published_at IS NULL AND l.dead_lettered_at IS NULL)) AS blocked),
	-- outbox_lease_idx
	(SELECT count(*) FROM {o}
		WHERE instance_id IS NOT NULL AND published_at IS NULL AND lease_expiry > {now})`

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
		"{mode}", modeOfParams("b", 2)).Replace(gaugesSQL)
}
