-- Backstop's PostgreSQL schema, version 25 ({{T}} and {{P}} as in 0001):
-- the wake-up of a statement that changed many streams no longer costs
-- the square of their number. stream_wake posts a wake-up for each changed
-- stream whose row another transaction holds; it found those rows as the
-- changed streams' rows NOT EXISTS among the rows it had locked, an array
-- it unnested for each of them (a nested loop: the planner takes an
-- unnested array for 10 rows). A relay that recorded its deliveries over
-- 10,000 strict streams spent 38 ms of each 54 ms DELETE there
-- (pg_stat_statements, insert-and-work, 640 rows a DELETE), and a DELETE
-- of 4,000 messages each the last of its stream took 830-970 ms; it takes
-- 52-79 ms now (12-21 ms at 600, 31-58 before).
-- The streams not locked are now the changed ones EXCEPT the locked ones,
-- a set difference PostgreSQL hashes, each then looked up by its key.
-- The function is otherwise 0014's.

CREATE OR REPLACE FUNCTION {{T}}stream_wake() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
	v_dest  text[];
	v_key   text[];
	v_ready boolean[];
BEGIN
	-- The changed streams' rows that no other transaction holds, locked in
	-- key order.
	SELECT coalesce(array_agg(l.destination), '{}'), coalesce(array_agg(l.stream), '{}'),
		coalesce(array_agg(l.ready), '{}')
	INTO v_dest, v_key, v_ready
	FROM (
		SELECT s.destination, s.stream, s.ready FROM {{T}}streams s
		JOIN (SELECT DISTINCT destination, stream FROM changed
			WHERE stream <> '' AND (TG_OP = 'DELETE' OR instance_id IS NULL)) k
			ON k.destination = s.destination AND k.stream = s.stream
		ORDER BY s.destination, s.stream
		FOR UPDATE OF s SKIP LOCKED) l;

	-- A row another transaction holds gets a wake-up for the next claim.
	INSERT INTO {{T}}stream_wakes (destination, stream)
	SELECT k.destination, k.stream FROM (
		SELECT destination, stream FROM changed
		WHERE stream <> '' AND (TG_OP = 'DELETE' OR instance_id IS NULL)
		EXCEPT
		SELECT l.d, l.k FROM unnest(v_dest, v_key) AS l(d, k)) k
	WHERE EXISTS (SELECT 1 FROM {{T}}streams s
		WHERE s.destination = k.destination AND s.stream = k.stream);

	IF cardinality(v_dest) > 0 THEN
		IF current_setting('transaction_isolation') = 'read committed' THEN
			DELETE FROM {{T}}streams s USING unnest(v_dest, v_key) AS l(d, k)
			WHERE s.destination = l.d AND s.stream = l.k
				AND NOT EXISTS (SELECT 1 FROM {{T}}outbox o
					WHERE o.destination = l.d AND o.stream = l.k
						AND o.stream <> '' AND o.published_at IS NULL);
		END IF;
		UPDATE {{T}}streams s SET ready = true, wait_until = NULL, turn = nextval('{{T}}streams_turn')
		FROM unnest(v_dest, v_key, v_ready) AS l(d, k, r)
		WHERE s.destination = l.d AND s.stream = l.k AND NOT l.r;
	END IF;

	IF TG_OP = 'UPDATE' THEN
		-- A message made undelivered again (a replay) in a stream that has
		-- no row any more gets one.
		INSERT INTO {{T}}streams (destination, stream)
		SELECT DISTINCT c.destination, c.stream FROM changed c
		WHERE c.stream <> '' AND c.instance_id IS NULL AND c.published_at IS NULL
			AND c.ordering IS DISTINCT FROM 'none'
			AND NOT EXISTS (SELECT 1 FROM {{T}}streams s WHERE s.destination = c.destination AND s.stream = c.stream)
		ON CONFLICT DO NOTHING;
	END IF;
	RETURN NULL;
END
$$;
