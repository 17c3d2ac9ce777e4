package postgres

// The claim statement. It leases at most $3 messages, in seq order, and
// follows the claim rules of package store:
//
// Each branch scans one partial index on a bounded, seq-ordered candidate
// set and locks with SKIP LOCKED, so concurrent claimers take disjoint
// rows and never wait on each other:
//
//   - fresh:   never-scheduled, unleased rows (outbox_fresh_idx, by seq);
//   - due:     unleased rows whose later try is due (outbox_due_idx, a
//     range on scheduled_for, so that future retries are never read);
//   - expired: rows whose lease lapsed (outbox_lease_idx).
//
// In every branch a row is skipped when an earlier message of its stream
// holds it back (held): an unexpired lease, or under strict ordering a
// dead-lettered or waiting message the stream was not released past. The
// probe uses outbox_stream_idx.
//
// A second pass (pick) drops a locked row when an earlier message of its
// stream is claimable but not among the rows this statement locked, which
// happens when another instance locked it first or a branch's limit cut it
// off: claiming the later one alone would let it overtake the earlier one.
// The earliest eligible row always survives, so claims always progress.
//
// Parameters: $1 now (NULL: database clock), $2 instance, $3 limit, $4
// lease in microseconds, $5 destinations (empty: all), $6 excluded
// destinations, $7/$8 destinations with a policy and their ordering
// modes, $9 the default policy's ordering mode.
const claimSQL = `
WITH fresh AS (
	SELECT c.seq, c.destination, c.stream, c.ordering FROM {o} c
	WHERE c.published_at IS NULL AND c.dead_lettered_at IS NULL
		AND c.instance_id IS NULL AND c.scheduled_for IS NULL
		AND {dest} AND {free}
	ORDER BY c.seq LIMIT $3
	FOR UPDATE OF c SKIP LOCKED
), due AS (
	SELECT c.seq, c.destination, c.stream, c.ordering FROM {o} c
	WHERE c.published_at IS NULL AND c.dead_lettered_at IS NULL
		AND c.instance_id IS NULL AND c.scheduled_for IS NOT NULL
		AND c.scheduled_for <= {now}
		AND {dest} AND {free}
	ORDER BY c.seq LIMIT $3
	FOR UPDATE OF c SKIP LOCKED
), expired AS (
	SELECT c.seq, c.destination, c.stream, c.ordering FROM {o} c
	WHERE c.instance_id IS NOT NULL AND c.lease_expiry <= {now}
		AND c.published_at IS NULL AND c.dead_lettered_at IS NULL
		AND (c.scheduled_for IS NULL OR c.scheduled_for <= {now})
		AND {dest} AND {free}
	ORDER BY c.seq LIMIT $3
	FOR UPDATE OF c SKIP LOCKED
), locked AS (
	SELECT * FROM fresh UNION ALL SELECT * FROM due UNION ALL SELECT * FROM expired
), pick AS (
	SELECT l.seq FROM locked l
	WHERE l.stream = '' OR coalesce(l.ordering, {mode l}) = 'none' OR NOT EXISTS (
		SELECT 1 FROM {o} e
		WHERE e.destination = l.destination AND e.stream = l.stream AND e.stream <> ''
			AND e.seq < l.seq AND e.published_at IS NULL AND e.dead_lettered_at IS NULL
			AND (e.instance_id IS NULL OR e.lease_expiry <= {now})
			AND (e.scheduled_for IS NULL OR e.scheduled_for <= {now})
			AND coalesce(e.ordering, {mode l}) <> 'none'
			AND e.seq NOT IN (SELECT seq FROM locked))
	ORDER BY l.seq LIMIT $3
)
UPDATE {o} o SET instance_id = $2, lease_expiry = {now} + $4 * interval '1 microsecond'
WHERE o.seq = ANY(ARRAY(SELECT seq FROM pick))
RETURNING {cols o}`

// claimDest restricts a candidate c to the requested destinations.
const claimDest = `(cardinality($5::text[]) = 0 OR c.destination = ANY($5::text[]))
		AND NOT (c.destination = ANY($6::text[]))`

// claimFree says no earlier message of c's stream holds c back.
const claimFree = `(c.stream = '' OR coalesce(c.ordering, {mode c}) = 'none' OR NOT EXISTS (
		SELECT 1 FROM {o} e
		WHERE e.destination = c.destination AND e.stream = c.stream AND e.stream <> ''
			AND e.seq < c.seq AND e.published_at IS NULL
			AND coalesce(e.ordering, {mode c}) <> 'none'
			AND ((e.instance_id IS NOT NULL AND e.lease_expiry > {now})
				OR (coalesce(e.ordering, {mode c}) = 'strict' AND e.stream_released_at IS NULL
					AND (e.dead_lettered_at IS NOT NULL OR e.scheduled_for > {now})))))`

// modeOf is the ordering mode of alias's destination: its policy's, or the
// default policy's.
func modeOf(alias string) string {
	return `coalesce(($8::text[])[array_position($7::text[], ` + alias + `.destination)], $9::text)`
}
