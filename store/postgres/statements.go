package postgres

import "strings"

// The statements of ProcessBatch. Those that need the time take it as $1:
// the clock's reading in tests, NULL in production (nowExpr falls back to
// the database clock). Rows are found by id through the outbox's unique index
// on id; ids are sorted in Go so that every instance locks in one order.

// nowExpr is the statement time.
const nowExpr = `coalesce($1::timestamptz, now())`

// heartbeatSQL records that instance $2 is alive; an empty host or zero
// pid keeps what an earlier heartbeat said.
const heartbeatSQL = `
INSERT INTO {i} AS i (id, host, pid, started_at, last_heartbeat)
VALUES ($2, $3, $4, $5, {now})
ON CONFLICT (id) DO UPDATE SET host = coalesce(nullif(excluded.host, ''), i.host),
	pid = coalesce(nullif(excluded.pid, 0), i.pid),
	started_at = coalesce(excluded.started_at, i.started_at),
	last_heartbeat = excluded.last_heartbeat`

// deadInstancesSQL deletes the instances silent for longer than $3
// microseconds, clears their leases (outbox_lease_idx holds only leased
// rows) and their waiting registrations (WakeGate), returning how many it
// declared dead. It also drops the registrations of Listen callers whose
// listening connection's server process is gone. A heart-beat further ahead than $3 can only come from a
// clock stepped back since: it is taken as of now (stepped), so that a
// dead instance goes one timeout later instead of holding its leases for
// the length of the step; a live one heart-beats again within the timeout.
var deadInstancesSQL = `
WITH stepped AS (
	UPDATE {i} SET last_heartbeat = {now}
	WHERE id <> $2 AND last_heartbeat > {now} + $3 * interval '1 microsecond'
), dead AS (
	-- a heartbeat from before a step forward of the clock is that much
	-- younger than its stamp says (clock_steps): past the timeout by its
	-- stamp alone, every live instance would go, and its leases with it,
	-- which the lease hold keeps from the other instances' claims
	DELETE FROM {i} WHERE id <> $2 AND last_heartbeat < {now} - $3 * interval '1 microsecond'
		- ` + stepsWithinSQL("$3") + `
	RETURNING id
), freed AS (
	UPDATE {o} SET instance_id = NULL, lease_expiry = NULL
	WHERE instance_id IS NOT NULL AND instance_id IN (SELECT id FROM dead)
	RETURNING 1
), unwaited AS (
	DELETE FROM {w} WHERE id IN (SELECT id FROM dead)
), unlistened AS (
	-- the registrations of Listen callers whose listening connection is
	-- gone (listenerID): a process that died never ended its own
	DELETE FROM {w} WHERE id ~ '^listen:[0-9]+:'
		AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a
			WHERE a.pid::text = split_part(id, ':', 2))
)
SELECT count(*)::int FROM dead`

// deletePublishedSQL removes delivered messages (no retention).
const deletePublishedSQL = `DELETE FROM {o} WHERE id = ANY($1::uuid[])`

// completeSQL ORs in completed flags and clears the lease; a Published
// flag also stamps published_at (kept for the retention period). Status 0
// is the cascade release: status | 0 leaves the flags alone.
const completeSQL = `
UPDATE {o} o SET status = o.status | c.st, instance_id = NULL, lease_expiry = NULL,
	published_at = CASE WHEN c.st & 4 <> 0 THEN {now} ELSE o.published_at END
FROM unnest($2::uuid[], $3::int[]) AS c(id, st)
WHERE o.id = c.id`

// lockFailuresSQL locks the rows of failures in id order and reads what
// the failure decision needs, and whether an operator dead-lettered the
// row while it was leased (DeadLetter keeps its lease).
const lockFailuresSQL = `
SELECT id, destination, attempts, coalesce(instance_id, ''), dead_lettered_at IS NOT NULL FROM {o}
WHERE id = ANY($1::uuid[]) ORDER BY id FOR UPDATE`

// unparkSQL drops $1's leases on the rows of $2 an operator dead-lettered
// while $1 delivered them, once their delivery failed: the row stays
// parked, and its entry can be replayed.
const unparkSQL = `
UPDATE {o} SET instance_id = NULL, lease_expiry = NULL
WHERE id = ANY($2::uuid[]) AND instance_id = $1 AND dead_lettered_at IS NOT NULL`

// failSQL records failures decided in Go (store.Config.DecideFailure) on
// rows locked by lockFailuresSQL, still leased by $2 and not dead-lettered.
const failSQL = `
UPDATE {o} o SET status = o.status | f.flags | 32768, attempts = f.attempts,
	failure_reason = f.reason, error = f.err, fingerprint = nullif(f.fp, ''),
	first_failed_at = coalesce(o.first_failed_at, {now}), last_failed_at = {now},
	instance_id = NULL, lease_expiry = NULL,
	scheduled_for = CASE WHEN f.dl THEN NULL ELSE {now} + f.delay * interval '1 microsecond' END,
	dead_lettered_at = CASE WHEN f.dl THEN {now} END
FROM unnest($3::uuid[], $4::int[], $5::int[], $6::int[], $7::text[], $8::text[], $9::bigint[], $10::bool[])
	AS f(id, flags, attempts, reason, err, fp, delay, dl)
WHERE o.id = f.id AND o.instance_id = $2 AND o.dead_lettered_at IS NULL`

// deadLetterSQL copies dead-lettered rows into the dead-letter queue, with
// the error text $7 (the failure's, or the operator's).
const deadLetterSQL = `
INSERT INTO {d} (id, message_id, destination, stream, type, payload, headers, seq,
	failure_reason, reason, failure_time, first_failure_time, attempts,
	last_attempt_time, error_message, fingerprint, metadata)
SELECT d.entry, o.id::text, o.destination, o.stream, o.type, o.payload, o.headers, o.seq,
	d.rname, d.reason, coalesce(o.dead_lettered_at, {now}), o.first_failed_at, o.attempts,
	o.last_failed_at, d.err, coalesce(o.fingerprint, ''), d.meta::jsonb
FROM unnest($2::text[], $3::uuid[], $4::text[], $5::int[], $6::text[], $7::text[])
	AS d(entry, id, rname, reason, meta, err)
JOIN {o} o ON o.id = d.id`

// releaseSQL gives leased messages back without charging an attempt; a
// message dead-lettered meanwhile gets no due time. One given a wait (a
// fault blamed on the destination) has the fault's time stamped as its
// last failure, as a retry has: its due time is that time plus the wait,
// which rebaseSQL moves when the clock is stepped back.
const releaseSQL = `
UPDATE {o} o SET instance_id = NULL, lease_expiry = NULL, status = o.status | r.flags,
	scheduled_for = CASE WHEN r.after > 0 AND o.dead_lettered_at IS NULL
		THEN {now} + r.after * interval '1 microsecond' ELSE o.scheduled_for END,
	last_failed_at = CASE WHEN r.after > 0 AND o.dead_lettered_at IS NULL
		THEN {now} ELSE o.last_failed_at END,
	error = CASE WHEN r.err <> '' THEN r.err ELSE o.error END
FROM unnest($3::uuid[], $4::bigint[], $5::int[], $6::text[]) AS r(id, after, flags, err)
WHERE o.id = r.id AND o.instance_id = $2
RETURNING o.id`

// rebaseSQL moves up to $2 waiting messages whose last failure is stamped
// more than a second ahead of now, scheduled on a clock since stepped
// back, to their delay from now (store.ScheduleRebaser). It reads the
// due index from now on.
const rebaseSQL = `
UPDATE {o} o SET scheduled_for = {now} + (o.scheduled_for - o.last_failed_at), last_failed_at = {now}
WHERE o.seq IN (
	SELECT seq FROM {o}
	WHERE published_at IS NULL AND dead_lettered_at IS NULL AND instance_id IS NULL
		AND scheduled_for > {now} AND last_failed_at > {now} + interval '1 second'
		-- an infinite time (a row older than the checks) cannot be
		-- subtracted: the row is the quarantine's
		AND isfinite(scheduled_for) AND isfinite(last_failed_at)
	ORDER BY scheduled_for, seq LIMIT $2 FOR UPDATE SKIP LOCKED)`

// renewSQL extends the caller's own leases to $4 microseconds from now; it
// never shortens a longer lease, and returns the new expiries, and with a
// NULL expiry the caller's rows it passed over because another session
// holds them locked (store.Result.Deferred). Before, it waited for such a
// lock: one row an operator's open transaction held locked failed every
// claim call that renewed it (lock_timeout, or the call's 30 s), and so
// every other renewal with it, for as long as the lock was held.
const renewSQL = `
WITH mine AS (
	SELECT id FROM {o} WHERE id = ANY($3::uuid[]) AND instance_id = $2
), free AS (
	SELECT id FROM {o} WHERE id IN (SELECT id FROM mine) AND instance_id = $2
	ORDER BY id FOR UPDATE SKIP LOCKED
), renewed AS (
	UPDATE {o} o SET lease_expiry = greatest(o.lease_expiry, {now} + $4 * interval '1 microsecond')
	FROM free WHERE o.id = free.id
	RETURNING o.id, o.lease_expiry
)
SELECT id, lease_expiry FROM renewed
UNION ALL
SELECT id, NULL FROM mine WHERE id NOT IN (SELECT id FROM free)`

// insertSQL writes messages from arrays, in array order (so seq follows
// it), created now; it returns what Enqueue reports back.
const insertSQL = `
INSERT INTO {o} (id, destination, stream, type, payload, headers, ordering, scheduled_for, created_at)
SELECT m.id, m.destination, m.stream, m.type, m.payload, m.headers, m.ordering, m.scheduled_for, {now}
FROM unnest($2::uuid[], $3::text[], $4::text[], $5::text[], $6::bytea[], $7::jsonb[], $8::text[],
	$9::timestamptz[]) WITH ORDINALITY AS m(id, destination, stream, type, payload, headers, ordering, scheduled_for, n)
ORDER BY m.n
RETURNING seq, created_at`

// insertOneSQL writes one message: insertSQL without the arrays, which
// for a single row cost more than the row (encoding nine arrays, unnest,
// the sort).
const insertOneSQL = `
INSERT INTO {o} (id, destination, stream, type, payload, headers, ordering, scheduled_for, created_at)
VALUES ($2::uuid, $3::text, $4::text, $5::text, $6::bytea, $7::jsonb, $8::text, $9::timestamptz, {now})
RETURNING seq, created_at`

// stepSQL returns the transaction's now(), the clock's reading as it runs
// ($1 in tests) and whether it recorded a step. When now is further than
// $4 microseconds (stepThreshold) past $2, the earliest the clock could
// read by the store's previous reading and the process's monotonic clock
// (NULL: no previous reading), the clock was stepped forward, and every
// lease looks that much shorter than it is. It records the step in
// clock_steps (migration 0036) with a hold until the last lease granted
// before it ends as it would have without it (its expiry plus the step),
// during which no lease lapses; or, when a step was recorded within the
// last lease ($3 microseconds: the same step, seen late by another store,
// or a second one), it lengthens that hold to a lease from now. A hold
// ends within an hour of its step (the claim reads no further), and the
// newest 1,000 steps are kept (the sweeps read those within their
// windows).
const stepSQL = `
WITH step AS (
	INSERT INTO {fn}clock_steps (noticed_at, ahead, held_until)
	SELECT {now}, {now} - $2::timestamptz, least({now} + interval '1 hour', greatest({now},
		(SELECT max(o.lease_expiry) FROM {o} o WHERE o.instance_id IS NOT NULL AND o.published_at IS NULL)
			+ ({now} - $2::timestamptz)))
	WHERE {now} - $2::timestamptz > $4 * interval '1 microsecond'
		AND NOT EXISTS (SELECT 1 FROM {fn}clock_steps c
			WHERE c.noticed_at > {now} - $3 * interval '1 microsecond' AND c.noticed_at <= {now})
	ON CONFLICT DO NOTHING
	RETURNING 1
), lengthened AS (
	-- a step within a lease of the one recorded, as likely the same step
	-- seen by another store as a second one: the hold lasts a lease from
	-- it, for the leases renewed between the steps look shorter by the
	-- second; its ahead is not counted twice
	UPDATE {fn}clock_steps c SET held_until = least(c.noticed_at + interval '1 hour',
		greatest(c.held_until, {now} + $3 * interval '1 microsecond'))
	FROM (SELECT x.noticed_at FROM {fn}clock_steps x
		WHERE {now} - $2::timestamptz > $4 * interval '1 microsecond'
			AND x.noticed_at > {now} - $3 * interval '1 microsecond' AND x.noticed_at <= {now}
		ORDER BY x.noticed_at DESC LIMIT 1 FOR UPDATE SKIP LOCKED) l
	WHERE c.noticed_at = l.noticed_at
), pruned AS (
	DELETE FROM {fn}clock_steps WHERE EXISTS (SELECT 1 FROM step)
		AND noticed_at < (SELECT noticed_at FROM {fn}clock_steps ORDER BY noticed_at DESC OFFSET 999 LIMIT 1)
)
SELECT {now}, coalesce($1::timestamptz, clock_timestamp()), EXISTS (SELECT 1 FROM step)`

// stepsWithinSQL is how much the clock was stepped forward by the steps
// recorded (clock_steps) within the window that ends now and began window
// (a parameter's name, in microseconds) before: a record stamped before
// them is that much younger than its stamp says. {fn} and {now} are left
// for newStatements' replacer (or stepsWithin's).
func stepsWithinSQL(window string) string {
	return `coalesce((SELECT sum(c.ahead) FROM {fn}clock_steps c
		WHERE c.noticed_at > {now} - ` + window + ` * interval '1 microsecond' AND c.noticed_at <= {now}), interval '0')`
}

// stepsWithin is stepsWithinSQL with the store's names filled in, for the
// statements built outside newStatements.
func (s *Store) stepsWithin(window string) string {
	return strings.NewReplacer("{fn}", s.n.qual, "{now}", nowExpr).Replace(stepsWithinSQL(window))
}

// lapseSQL is the time at or before which a lease has lapsed, read at
// the time now (an expression): now itself, or -infinity while a step of
// the clock holds the leases (clock_steps, migration 0036), as the claim
// reads it (its v_lapse): then no lease lapses. Operators' views and
// actions read a lease as live when its expiry is past it, so that a
// message still being delivered across a step is shown leased and is not
// cancelled or replayed under its relay. {fn} is left for lapseAt.
func lapseSQL(now string) string {
	return `(CASE WHEN EXISTS (SELECT 1 FROM {fn}clock_steps h
		WHERE h.noticed_at > ` + now + ` - interval '1 hour' AND h.noticed_at <= ` + now + `
			AND least(h.held_until, h.noticed_at + interval '1 hour') > ` + now + `)
		THEN '-infinity'::timestamptz ELSE ` + now + ` END)`
}

// lapseAt is lapseSQL with the store's names filled in.
func (s *Store) lapseAt(now string) string {
	return strings.ReplaceAll(lapseSQL(now), "{fn}", s.n.qual)
}

// inFlight is true of a message a relay holds a live lease on (lapseAt:
// the hold of a step of the clock included), the time being the parameter
// param: one dead-lettered by hand while it was being delivered
// (DeadLetter keeps the lease), or one Cancel must not delete.
func (s *Store) inFlight(param string) string {
	return `o.instance_id IS NOT NULL AND o.lease_expiry > ` + s.lapseAt("coalesce("+param+"::timestamptz, now())")
}

// statements are the SQL texts with the store's names filled in.
type statements struct {
	insert, insertOne                                   string
	heartbeat, deadInstances, deletePublished, complete string
	lockFailures, fail, deadLetter, release, renew      string
	unpark, rebase                                      string
	claim, step                                         string
}

func newStatements(n names) statements {
	r := strings.NewReplacer(
		"{o}", n.outbox, "{i}", n.instances, "{w}", n.qual+"waiters", "{d}", n.deadLetters, "{now}", nowExpr,
		"{fn}", n.qual, "{cols o}", msgColsOf("o"),
	)
	return statements{
		insert:          r.Replace(insertSQL),
		insertOne:       r.Replace(insertOneSQL),
		heartbeat:       r.Replace(heartbeatSQL),
		deadInstances:   r.Replace(deadInstancesSQL),
		deletePublished: r.Replace(deletePublishedSQL),
		complete:        r.Replace(completeSQL),
		lockFailures:    r.Replace(lockFailuresSQL),
		unpark:          r.Replace(unparkSQL),
		fail:            r.Replace(failSQL),
		deadLetter:      r.Replace(deadLetterSQL),
		release:         r.Replace(releaseSQL),
		rebase:          r.Replace(rebaseSQL),
		renew:           r.Replace(renewSQL),
		claim:           r.Replace(claimSQL),
		step:            r.Replace(stepSQL),
	}
}
