-- Backstop's PostgreSQL schema, version 24 ({{T}} and {{P}} as in 0001):
-- a claim finds every destination with an unordered retry due, whatever
-- the claim excludes. claim_destinations took the first 1,000 due
-- unordered retries of every destination (outbox_due_idx, by due time),
-- and the claim dropped the excluded destinations only afterwards: 1,100
-- due retries of a destination the relay excludes (its circuit open, its
-- slots full) hid a due retry of every other destination until they were
-- taken (TestClaimFindsEveryDueDestination). outbox_unordered_due_idx
-- holds only unordered retries a claim can take, by destination, so the
-- function finds their destinations with a skip scan (two probes per
-- destination that has any) and then asks each whether one is due. Rows
-- enter it when an unordered message fails and is scheduled again, and
-- leave it at their next lease: fresh messages and leases never touch it.
--
-- Lapsed unordered leases keep their cut of 1,000: leases of an instance
-- that died are taken back by the fleet's sweep (InstanceTimeout), which
-- makes them fresh, so an excluded destination's lapsed leases hide the
-- others' only until then; an index of unordered leases by destination
-- would cost every message an entry at its lease.

CREATE OR REPLACE FUNCTION {{T}}claim_destinations(p_now timestamptz) RETURNS TABLE (destination text)
LANGUAGE sql STABLE AS $$
	WITH RECURSIVE rs AS (
		(SELECT s.destination FROM {{T}}streams s WHERE s.ready ORDER BY s.destination LIMIT 1)
		UNION ALL
		SELECT (SELECT s.destination FROM {{T}}streams s WHERE s.ready AND s.destination > rs.destination
			ORDER BY s.destination LIMIT 1)
		FROM rs WHERE rs.destination IS NOT NULL
	), us AS (
		(SELECT o.destination FROM {{T}}outbox o
			WHERE o.published_at IS NULL AND o.dead_lettered_at IS NULL
				AND o.instance_id IS NULL AND o.scheduled_for IS NULL AND (o.stream = '' OR o.ordering = 'none')
			ORDER BY o.destination LIMIT 1)
		UNION ALL
		SELECT (SELECT o.destination FROM {{T}}outbox o
			WHERE o.published_at IS NULL AND o.dead_lettered_at IS NULL
				AND o.instance_id IS NULL AND o.scheduled_for IS NULL AND (o.stream = '' OR o.ordering = 'none')
				AND o.destination > us.destination
			ORDER BY o.destination LIMIT 1)
		FROM us WHERE us.destination IS NOT NULL
	), ds AS (
		(SELECT o.destination FROM {{T}}outbox o
			WHERE o.published_at IS NULL AND o.dead_lettered_at IS NULL
				AND o.instance_id IS NULL AND o.scheduled_for IS NOT NULL AND (o.stream = '' OR o.ordering = 'none')
			ORDER BY o.destination LIMIT 1)
		UNION ALL
		SELECT (SELECT o.destination FROM {{T}}outbox o
			WHERE o.published_at IS NULL AND o.dead_lettered_at IS NULL
				AND o.instance_id IS NULL AND o.scheduled_for IS NOT NULL AND (o.stream = '' OR o.ordering = 'none')
				AND o.destination > ds.destination
			ORDER BY o.destination LIMIT 1)
		FROM ds WHERE ds.destination IS NOT NULL
	)
	SELECT rs.destination FROM rs WHERE rs.destination IS NOT NULL
	UNION
	SELECT us.destination FROM us WHERE us.destination IS NOT NULL
	UNION
	SELECT ds.destination FROM ds WHERE ds.destination IS NOT NULL AND EXISTS (
		SELECT 1 FROM {{T}}outbox o
		WHERE o.destination = ds.destination AND o.published_at IS NULL AND o.dead_lettered_at IS NULL
			AND o.instance_id IS NULL AND o.scheduled_for IS NOT NULL AND o.scheduled_for <= p_now
			AND (o.stream = '' OR o.ordering = 'none'))
	UNION
	SELECT e.destination FROM (SELECT o.destination FROM {{T}}outbox o
		WHERE o.instance_id IS NOT NULL AND o.lease_expiry <= p_now
			AND o.published_at IS NULL AND o.dead_lettered_at IS NULL
			AND (o.stream = '' OR o.ordering = 'none')
		ORDER BY o.lease_expiry LIMIT 1000) e
$$;

-- backstop:build-concurrently
CREATE INDEX CONCURRENTLY IF NOT EXISTS {{P}}outbox_unordered_due_idx ON {{T}}outbox (destination, scheduled_for)
	WHERE published_at IS NULL AND dead_lettered_at IS NULL AND instance_id IS NULL
	AND scheduled_for IS NOT NULL AND (stream = '' OR ordering = 'none');
