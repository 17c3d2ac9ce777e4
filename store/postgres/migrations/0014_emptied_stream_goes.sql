-- Backstop's PostgreSQL schema, version 14 ({{T}} and {{P}} as in 0001):
-- the change that delivers a stream's last undelivered message removes the
-- stream's row. Before, it marked the row ready with a new turn, and a
-- later claim read the stream, found it empty and deleted the row: over
-- many streams holding a message or two each, every message cost its stream
-- an update of the row and a claim's visit besides the writer's insert and
-- the claim's own update. Now the wake-up looks, through outbox_stream_idx,
-- for an undelivered message of the stream (dead-lettered ones count) and,
-- finding none, deletes the row it holds; a stream with messages left is
-- woken as before.
--
-- Why no message can be stranded: a writer locks its stream's row (the
-- upsert in outbox_order) before its message exists and keeps the lock
-- until it commits. The wake-up takes the row with SKIP LOCKED, so a stream
-- being written is never deleted (a wake-up is posted instead, as before);
-- a writer that committed before the lock was taken is seen by the look for
-- messages, which is a statement of its own and so, under READ COMMITTED,
-- takes its snapshot after the lock. Under a stronger isolation the
-- transaction's snapshot may predate such a writer, so there the row is
-- marked ready as before and the next claim removes it.

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
	SELECT s.destination, s.stream FROM {{T}}streams s
	JOIN (SELECT DISTINCT destination, stream FROM changed
		WHERE stream <> '' AND (TG_OP = 'DELETE' OR instance_id IS NULL)) k
		ON k.destination = s.destination AND k.stream = s.stream
	WHERE NOT EXISTS (SELECT 1 FROM unnest(v_dest, v_key) AS l(d, k)
		WHERE l.d = s.destination AND l.k = s.stream);

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

-- The row trigger of 0013 does the same for a message delivered and kept
-- (a retention period): stamped published, it was the stream's last.
CREATE OR REPLACE FUNCTION {{T}}stream_wake_row() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
	v_ready boolean;
BEGIN
	SELECT s.ready INTO v_ready FROM {{T}}streams s
	WHERE s.destination = NEW.destination AND s.stream = NEW.stream
	FOR UPDATE SKIP LOCKED;
	IF FOUND THEN
		IF NEW.published_at IS NOT NULL
			AND current_setting('transaction_isolation') = 'read committed'
			AND NOT EXISTS (SELECT 1 FROM {{T}}outbox o
				WHERE o.destination = NEW.destination AND o.stream = NEW.stream
					AND o.stream <> '' AND o.published_at IS NULL) THEN
			DELETE FROM {{T}}streams WHERE destination = NEW.destination AND stream = NEW.stream;
		ELSIF NOT v_ready THEN
			UPDATE {{T}}streams SET ready = true, wait_until = NULL, turn = nextval('{{T}}streams_turn')
			WHERE destination = NEW.destination AND stream = NEW.stream;
		END IF;
	ELSIF EXISTS (SELECT 1 FROM {{T}}streams s WHERE s.destination = NEW.destination AND s.stream = NEW.stream) THEN
		INSERT INTO {{T}}stream_wakes (destination, stream) VALUES (NEW.destination, NEW.stream);
	ELSIF NEW.published_at IS NULL AND NEW.ordering IS DISTINCT FROM 'none' THEN
		-- A message made undelivered again in a stream that has no row.
		INSERT INTO {{T}}streams (destination, stream) VALUES (NEW.destination, NEW.stream)
		ON CONFLICT DO NOTHING;
	END IF;
	RETURN NULL;
END
$$;
