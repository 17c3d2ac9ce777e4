-- Backstop's PostgreSQL schema, version 38 ({{T}} and {{P}} as in 0001):
-- deleting messages none of which is in a stream costs no stream work.
--
-- stream_wake, the statement trigger after a DELETE on the outbox, ran its
-- two statements over the stream rows on every call: locking the changed
-- streams' rows and posting wake-ups for those held elsewhere. Each starts
-- an executor for a plan of several joins, which costs more than running
-- it on the handful of rows a call changes, and most calls change none: a
-- relay recording the deliveries of unordered messages deletes them in
-- batches of tens while writers keep it busy (insert-and-work: the
-- recording DELETE cost about 8 us a message there against 2.75 in a
-- drain, its backend as busy as the claim's).
-- The function now returns at once when no deleted row has a stream.
-- pgbench, one connection, DELETE of 50 unordered rows by seq range over a
-- 2M-row outbox: 0.41-0.45 ms before, 0.37-0.43 ms after, interleaved.
-- Insert-and-work on a machine where the relay kept up either way (four
-- alternated pairs): 48.2k-48.9k msgs/s before, 48.0k-50.1k after, the
-- backlog left 0.02-0.13 s of inserts both ways; within the noise.
-- It is otherwise 0025's, less what served an UPDATE: since 0013 the
-- trigger after an UPDATE is stream_wake_row, and this function runs after
-- a DELETE only, so its TG_OP tests and its branch for an UPDATE were dead.

CREATE OR REPLACE FUNCTION {{T}}stream_wake() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
	v_dest  text[];
	v_key   text[];
	v_ready boolean[];
BEGIN
	-- Most statements change no stream's message: a relay recording the
	-- deliveries of unordered messages, a purge of published rows.
	IF NOT EXISTS (SELECT 1 FROM changed WHERE stream <> '') THEN
		RETURN NULL;
	END IF;

	-- The changed streams' rows that no other transaction holds, locked in
	-- key order.
	SELECT coalesce(array_agg(l.destination), '{}'), coalesce(array_agg(l.stream), '{}'),
		coalesce(array_agg(l.ready), '{}')
	INTO v_dest, v_key, v_ready
	FROM (
		SELECT s.destination, s.stream, s.ready FROM {{T}}streams s
		JOIN (SELECT DISTINCT destination, stream FROM changed
			WHERE stream <> '') k
			ON k.destination = s.destination AND k.stream = s.stream
		ORDER BY s.destination, s.stream
		FOR UPDATE OF s SKIP LOCKED) l;

	-- A row another transaction holds gets a wake-up for the next claim.
	INSERT INTO {{T}}stream_wakes (destination, stream)
	SELECT k.destination, k.stream FROM (
		SELECT destination, stream FROM changed
		WHERE stream <> ''
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

	RETURN NULL;
END
$$;
