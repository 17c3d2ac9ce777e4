package postgres

import "strings"

// lifecycleStatements are the statements of the dead-letter lifecycle,
// lease-safe completions and quarantine, with the store's names filled in.
type lifecycleStatements struct {
	resolveDelivered, completeLeased, quarantine string
}

func newLifecycleStatements(n names) lifecycleStatements {
	r := strings.NewReplacer("{o}", n.outbox, "{d}", n.deadLetters, "{now}", nowExpr)
	return lifecycleStatements{
		resolveDelivered: r.Replace(resolveDeliveredSQL),
		completeLeased:   r.Replace(completeLeasedSQL),
		quarantine:       r.Replace(quarantineSQL),
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

// quarantineSQL dead-letters claimed rows that could not be decoded ($2
// their seqs, leased by $7), each with its error $3, entry id $5 and
// metadata $6, reason $4 (named $8): the row is marked dead-lettered, its
// lease cleared, and its entry copies the row. It returns the message ids.
const quarantineSQL = `
WITH q AS (
	UPDATE {o} o SET dead_lettered_at = {now}, instance_id = NULL, lease_expiry = NULL,
		failure_reason = $4, error = b.err
	FROM unnest($2::bigint[], $3::text[], $5::text[], $6::jsonb[]) AS b(seq, err, entry, meta)
	WHERE o.seq = b.seq AND o.instance_id = $7
	RETURNING o.id, o.destination, o.stream, o.type, o.payload, o.headers, o.seq, o.attempts,
		b.err, b.entry, b.meta
)
INSERT INTO {d} (id, message_id, destination, stream, type, payload, headers, seq, failure_reason, reason,
	failure_time, attempts, last_attempt_time, error_message, metadata)
SELECT q.entry, q.id::text, q.destination, q.stream, q.type, q.payload,
	CASE WHEN jsonb_typeof(q.headers) = 'object' THEN q.headers ELSE '{}'::jsonb END,
	q.seq, $8, $4, {now}, greatest(q.attempts, 0), {now}, q.err, q.meta
FROM q
RETURNING message_id`
