package postgres

import "strings"

// lifecycleStatements are the statements of the dead-letter lifecycle,
// lease-safe completions and quarantine, with the store's names filled in.
type lifecycleStatements struct {
	resolveDelivered, completeLeased, quarantine, sweep string
}

func newLifecycleStatements(n names) lifecycleStatements {
	r := strings.NewReplacer("{o}", n.outbox, "{d}", n.deadLetters, "{i}", n.instances, "{now}", nowExpr, "{cols o}", msgColsOf("o"))
	return lifecycleStatements{
		resolveDelivered: r.Replace(resolveDeliveredSQL),
		completeLeased:   r.Replace(completeLeasedSQL),
		quarantine:       r.Replace(quarantineSQL),
		sweep:            r.Replace(sweepSQL),
	}
}

// completeLeasedSQL records completions without Published (the Status=0
// release, partial flags) on the messages instance $3 still leases, and
// returns the ids it applied; the others are stale.
const completeLeasedSQL = `
UPDATE {o} o SET status = o.status | c.st, instance_id = NULL, lease_expiry = NULL
FROM unnest($1::uuid[], $2::int[]) AS c(id, st)
WHERE o.id = c.id AND o.instance_id = $3
RETURNING o.id`

// validRow is the predicate of a row the store can decode, as the partial
// index outbox_invalid_idx (migration 0002) spells it: the sweep's
// NOT (validRow) must match the index's WHERE for the planner to use it.
const validRow = `destination <> '' AND type <> '' AND status BETWEEN 0 AND 65535 AND attempts >= 0 AND jsonb_typeof(headers) = 'object' AND isfinite(created_at) AND coalesce(isfinite(scheduled_for), true) AND coalesce(isfinite(lease_expiry), true) AND coalesce(isfinite(dead_lettered_at), true) AND coalesce(isfinite(first_failed_at), true) AND coalesce(isfinite(last_failed_at), true) AND coalesce(isfinite(stream_released_at), true) AND coalesce(isfinite(published_at), true)`

// heldByOther is the predicate, true of a row o, that an instance other
// than the parameter me leases it: the lease has not lapsed and its holder
// is registered (a heart-beat, and not yet declared dead). The sweep and
// the quarantine leave such a row to its holder, whose claim quarantines
// it. The registration is read by key, row by row (a scalar subquery): an
// EXISTS under the OR of NOT became a hashed subplan reading the whole
// instances table.
func heldByOther(me string) string {
	return `(o.instance_id IS NOT NULL AND o.instance_id <> ` + me + `
		AND coalesce(isfinite(o.lease_expiry) AND o.lease_expiry > {now}, false)
		AND coalesce((SELECT true FROM {i} i WHERE i.id = o.instance_id), false))`
}

// sweepSQL finds up to $3 rows the store cannot decode that are not yet
// dead-lettered and not validly leased by another instance ($2 is the
// caller, $1 now), whether or not a claim would take them (an infinite
// lease never lapses), and locks them. A lease is valid when it has not
// lapsed and its holder is a registered instance (heldByOther): a row
// written by plain SQL with an instance_id no relay has (an empty one,
// which a batch refuses, or a made-up name) and a lease into the next
// century was otherwise never quarantined, since no instance of that name
// is ever declared dead either.
var sweepSQL = `SELECT {cols o} FROM {o} o
WHERE NOT (` + validRow + `)
	AND (o.dead_lettered_at IS NULL OR NOT isfinite(o.dead_lettered_at))
	AND NOT ` + heldByOther("$2") + `
ORDER BY o.seq LIMIT $3
FOR UPDATE OF o SKIP LOCKED`

// quarantineSQL dead-letters rows that could not be decoded ($2 their
// seqs, claimed by $7 or swept), each with its error $3, entry id $5 and
// metadata $6, reason $4 (named $8): the row is marked dead-lettered, its
// lease and due time cleared, and the values the constraints refuse are
// mended (times that are not finite cleared, or now for created_at; headers
// that are not an object emptied; attempts and status brought in range;
// an empty destination or type named "(empty)"), since the entry's error
// and metadata keep the bad value. Its entry copies the row. It returns the
// message ids.
var quarantineSQL = `
WITH q AS (
	UPDATE {o} o SET dead_lettered_at = {now}, instance_id = NULL, lease_expiry = NULL, scheduled_for = NULL,
		failure_reason = $4, error = b.err,
		destination = CASE WHEN o.destination = '' THEN '(empty)' ELSE o.destination END,
		type = CASE WHEN o.type = '' THEN '(empty)' ELSE o.type END,
		status = CASE WHEN o.status BETWEEN 0 AND 65535 THEN o.status ELSE o.status & 65535 END,
		attempts = greatest(o.attempts, 0),
		headers = CASE WHEN jsonb_typeof(o.headers) = 'object' THEN o.headers ELSE '{}'::jsonb END,
		created_at = CASE WHEN isfinite(o.created_at) THEN o.created_at ELSE {now} END,
		first_failed_at = CASE WHEN isfinite(o.first_failed_at) THEN o.first_failed_at END,
		last_failed_at = CASE WHEN isfinite(o.last_failed_at) THEN o.last_failed_at END,
		stream_released_at = CASE WHEN isfinite(o.stream_released_at) THEN o.stream_released_at END,
		published_at = CASE WHEN isfinite(o.published_at) THEN o.published_at END
	FROM unnest($2::bigint[], $3::text[], $5::text[], $6::jsonb[]) AS b(seq, err, entry, meta)
	WHERE o.seq = b.seq AND (o.dead_lettered_at IS NULL OR NOT isfinite(o.dead_lettered_at))
		AND NOT ` + heldByOther("$7") + `
	RETURNING o.id, o.destination, o.stream, o.type, o.payload, o.headers, o.seq, o.attempts,
		b.err, b.entry, b.meta
)
INSERT INTO {d} (id, message_id, destination, stream, type, payload, headers, seq, failure_reason, reason,
	failure_time, attempts, last_attempt_time, error_message, metadata)
SELECT q.entry, q.id::text, q.destination, q.stream, q.type, q.payload, q.headers,
	q.seq, $8, $4, {now}, q.attempts, {now}, q.err, q.meta
FROM q
RETURNING message_id`
