-- Backstop's PostgreSQL schema, version 3 ({{T}} and {{P}} as in 0001):
-- the claim walks stream heads, never the rows waiting behind them, and the
-- messages of a stream are numbered in the order their transactions commit.
-- docs/claim.md explains the design.

-- One row per ordered (destination, stream) with undelivered messages.
--   ready:      a claim should look at the stream; ready streams are served
--               by turn (the oldest turn first: round-robin, not by depth);
--   wait_until: when not ready, the earliest time the stream may hold a
--               claimable message without anything being written (a lease
--               that expires, a retry that comes due); NULL when only a
--               write can free it (an empty stream, a dead-lettered strict
--               head);
--   head_seq:   every message of the stream below it is delivered.
-- Writers lock their stream's row (the upsert in outbox_order) until they
-- commit; claims lock it with SKIP LOCKED while they read the stream.
CREATE SEQUENCE {{T}}streams_turn;

CREATE TABLE {{T}}streams (
	destination text NOT NULL,
	stream      text NOT NULL,
	ready       boolean NOT NULL DEFAULT true,
	turn        bigint NOT NULL DEFAULT nextval('{{T}}streams_turn'),
	wait_until  timestamptz,
	head_seq    bigint NOT NULL DEFAULT 0,
	PRIMARY KEY (destination, stream)
);

-- Ready streams of a destination, by turn.
CREATE INDEX {{P}}streams_ready_idx ON {{T}}streams (destination, turn) WHERE ready;

-- Streams that become claimable by time alone.
CREATE INDEX {{P}}streams_wait_idx ON {{T}}streams (wait_until)
	WHERE NOT ready AND wait_until IS NOT NULL;

-- Wake-ups a change could not post on a stream row another transaction
-- held (claims consume them).
CREATE TABLE {{T}}stream_wakes (
	id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	destination text NOT NULL,
	stream      text NOT NULL
);

-- Backfill: every stream with undelivered messages starts ready.
INSERT INTO {{T}}streams (destination, stream, head_seq)
SELECT destination, stream, min(seq) FROM {{T}}outbox
WHERE published_at IS NULL AND stream <> '' AND ordering IS DISTINCT FROM 'none'
GROUP BY destination, stream;

-- Unordered messages (no stream, or ordering none) claim through their own
-- index, by destination and seq. The claim no longer reads outbox_fresh_idx.
CREATE INDEX {{P}}outbox_unordered_idx ON {{T}}outbox (destination, seq)
	WHERE published_at IS NULL AND dead_lettered_at IS NULL
	AND instance_id IS NULL AND scheduled_for IS NULL
	AND (stream = '' OR ordering = 'none');
DROP INDEX {{T}}outbox_fresh_idx;

-- {{T}}outbox_order runs before each insert of an ordered message: it
-- creates or locks the stream's row, and marks the stream ready, then numbers
-- the message. The lock is held until the writer commits, so the writers of
-- one stream take their seq one transaction after the other: seq order is
-- commit order, for plain SQL as for Backstop's Enqueue. Writers of other
-- streams, and unordered messages, do not wait.
CREATE FUNCTION {{T}}outbox_order() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.stream = '' OR NEW.ordering = 'none' THEN
		RETURN NEW;
	END IF;
	INSERT INTO {{T}}streams AS s (destination, stream) VALUES (NEW.destination, NEW.stream)
	ON CONFLICT (destination, stream) DO UPDATE
		SET ready = true, wait_until = NULL, turn = nextval('{{T}}streams_turn')
		WHERE NOT s.ready;
	NEW.seq := nextval('{{T}}outbox_seq_seq');
	RETURN NEW;
END
$$;

CREATE TRIGGER {{P}}outbox_order BEFORE INSERT ON {{T}}outbox
	FOR EACH ROW EXECUTE FUNCTION {{T}}outbox_order();

-- {{T}}stream_wake marks ready the streams whose messages changed in a
-- way that may free later messages: a lease cleared (delivered, failed,
-- released, dead-lettered, an instance declared dead), a retry made due, a
-- stream released, a message deleted. It never waits: a stream row another
-- transaction holds gets a row in stream_wakes instead, for the next claim.
CREATE FUNCTION {{T}}stream_wake() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	WITH k AS (
		SELECT DISTINCT destination, stream FROM changed
		WHERE stream <> '' AND (TG_OP = 'DELETE' OR instance_id IS NULL)
	), l AS (
		SELECT s.destination, s.stream, s.ready FROM {{T}}streams s
		JOIN k ON k.destination = s.destination AND k.stream = s.stream
		ORDER BY s.destination, s.stream
		FOR UPDATE OF s SKIP LOCKED
	), u AS (
		UPDATE {{T}}streams s SET ready = true, wait_until = NULL, turn = nextval('{{T}}streams_turn')
		FROM l WHERE s.destination = l.destination AND s.stream = l.stream AND NOT l.ready
	)
	INSERT INTO {{T}}stream_wakes (destination, stream)
	SELECT s.destination, s.stream FROM {{T}}streams s
	JOIN k ON k.destination = s.destination AND k.stream = s.stream
	WHERE NOT EXISTS (SELECT 1 FROM l WHERE l.destination = s.destination AND l.stream = s.stream);
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

CREATE TRIGGER {{P}}outbox_wake_update AFTER UPDATE ON {{T}}outbox
	REFERENCING NEW TABLE AS changed
	FOR EACH STATEMENT EXECUTE FUNCTION {{T}}stream_wake();

CREATE TRIGGER {{P}}outbox_wake_delete AFTER DELETE ON {{T}}outbox
	REFERENCING OLD TABLE AS changed
	FOR EACH STATEMENT EXECUTE FUNCTION {{T}}stream_wake();

-- {{T}}claim leases at most p_limit messages to p_instance until p_now
-- plus p_lease_us microseconds, following the claim rules of package store,
-- and returns them. p_now NULL is the database clock. p_only (empty: all)
-- and p_skip filter destinations; p_policy_dests/p_policy_modes give the
-- destinations' ordering modes, p_default_mode the others'; p_cap_dests and
-- p_caps the most to claim per destination (a destination not listed: only
-- p_limit).
--
-- For each destination it collects candidates, at most its cap:
--   - unordered messages in seq order (outbox_unordered_idx; due retries
--     by outbox_due_idx; lapsed leases by outbox_lease_idx);
--   - from the ready streams, oldest turn first, each stream's claimable
--     messages in seq order up to what is left of the cap, reading the stream
--     from its head (outbox_stream_idx) and stopping at the first message
--     that holds back the rest: a leased one, or under strict ordering one
--     that waits for its retry or is dead-lettered.
-- The p_limit lowest seqs among the candidates are leased. A stream then
-- waits (not ready) until its earliest lease or retry time, or until a write
-- or a change wakes it; rows behind a held head are never read. A stream
-- that had more to give takes a new turn, behind every ready stream: the
-- streams of a destination are served round-robin, whatever their depth. JIT is off:
-- compiling costs more than these short statements.
CREATE FUNCTION {{T}}claim(p_now timestamptz, p_instance text, p_limit int, p_lease_us bigint,
	p_only text[], p_skip text[], p_policy_dests text[], p_policy_modes text[], p_default_mode text,
	p_cap_dests text[], p_caps int[])
RETURNS SETOF {{T}}outbox
LANGUAGE plpgsql VOLATILE
SET jit = off
AS $$
DECLARE
	v_now    timestamptz := coalesce(p_now, now());
	v_expiry timestamptz := coalesce(p_now, now()) + p_lease_us * interval '1 microsecond';
	v_dest   text;
	v_mode   text;
	v_cap    int;
	-- candidates: seq and stream number (0: unordered)
	c_seq    bigint[] := '{}';
	c_str    int[] := '{}';
	c_dst    int[] := '{}';
	d_caps   int[] := '{}';
	-- streams read: destination, stream, head, wait, state (0 blocked or
	-- empty, 1 more claimable than was left of the cap, 2 a candidate was
	-- locked)
	s_dest   text[] := '{}';
	s_key    text[] := '{}';
	s_first  bigint[] := '{}';
	s_wait   timestamptz[] := '{}';
	s_state  int[] := '{}';
	v_keys   text[];
	v_heads  bigint[];
	v_useq   bigint[];
	v_take   bigint[];
	v_locked bigint[];
	v_final  bigint[];
	v_n      int;
	v_left   int;
	v_got    int;
	v_i      int;
	v_first  bigint;
	v_wait   timestamptz;
	v_state  int;
	v_m      text;
	v_seen   int;
	v_stop   boolean;
	r        record;
BEGIN
	IF p_limit <= 0 THEN
		RETURN;
	END IF;

	-- Streams whose lease or retry time came become ready.
	UPDATE {{T}}streams SET ready = true, wait_until = NULL, turn = nextval('{{T}}streams_turn')
	WHERE ctid = ANY(ARRAY(SELECT w.ctid FROM {{T}}streams w
		WHERE NOT w.ready AND w.wait_until <= v_now
		ORDER BY w.wait_until LIMIT 1000 FOR UPDATE SKIP LOCKED));

	-- Wake-ups posted while a stream row was held.
	WITH w AS (
		SELECT id, destination, stream FROM {{T}}stream_wakes ORDER BY id LIMIT 1000 FOR UPDATE SKIP LOCKED
	), l AS (
		SELECT s.* FROM (SELECT DISTINCT destination, stream FROM w) k
		CROSS JOIN LATERAL (SELECT s.destination, s.stream, s.ready FROM {{T}}streams s
			WHERE s.destination = k.destination AND s.stream = k.stream
			FOR UPDATE SKIP LOCKED) s
	), u AS (
		UPDATE {{T}}streams s SET ready = true, wait_until = NULL, turn = nextval('{{T}}streams_turn')
		FROM l WHERE s.destination = l.destination AND s.stream = l.stream AND NOT l.ready
	)
	DELETE FROM {{T}}stream_wakes x USING w
	WHERE x.id = w.id AND (
		EXISTS (SELECT 1 FROM l WHERE l.destination = w.destination AND l.stream = w.stream)
		OR NOT EXISTS (SELECT 1 FROM {{T}}streams s WHERE s.destination = w.destination AND s.stream = w.stream));

	FOR v_dest IN
		SELECT d.destination FROM (
			SELECT unnest(p_only) AS destination WHERE cardinality(p_only) > 0
			UNION
			SELECT x.destination FROM {{T}}claim_destinations(v_now) x WHERE cardinality(p_only) = 0
		) d
		WHERE NOT (d.destination = ANY(p_skip))
		ORDER BY d.destination
	LOOP
		v_cap := least(p_limit, coalesce(p_caps[array_position(p_cap_dests, v_dest)], p_limit));
		CONTINUE WHEN v_cap <= 0;
		v_mode := coalesce(p_policy_modes[array_position(p_policy_dests, v_dest)], p_default_mode);
		d_caps := d_caps || v_cap;

		-- Unordered candidates.
		WITH fresh AS (
			SELECT c.seq FROM {{T}}outbox c
			WHERE c.destination = v_dest AND c.published_at IS NULL AND c.dead_lettered_at IS NULL
				AND c.instance_id IS NULL AND c.scheduled_for IS NULL
				AND (c.stream = '' OR c.ordering = 'none')
			ORDER BY c.seq LIMIT v_cap
			FOR UPDATE OF c SKIP LOCKED
		), due AS (
			SELECT c.seq FROM {{T}}outbox c
			WHERE c.published_at IS NULL AND c.dead_lettered_at IS NULL
				AND c.instance_id IS NULL AND c.scheduled_for IS NOT NULL
				AND c.scheduled_for <= v_now
				AND c.destination = v_dest AND (c.stream = '' OR c.ordering = 'none')
			ORDER BY c.scheduled_for LIMIT v_cap
			FOR UPDATE OF c SKIP LOCKED
		), expired AS (
			SELECT c.seq FROM {{T}}outbox c
			WHERE c.instance_id IS NOT NULL AND c.lease_expiry <= v_now
				AND c.published_at IS NULL AND c.dead_lettered_at IS NULL
				AND (c.scheduled_for IS NULL OR c.scheduled_for <= v_now)
				AND c.destination = v_dest AND (c.stream = '' OR c.ordering = 'none')
			ORDER BY c.lease_expiry LIMIT v_cap
			FOR UPDATE OF c SKIP LOCKED
		)
		SELECT coalesce(array_agg(seq ORDER BY seq), '{}') INTO v_useq FROM (
			SELECT seq FROM (SELECT seq FROM fresh UNION ALL SELECT seq FROM due UNION ALL SELECT seq FROM expired) a
			ORDER BY seq LIMIT v_cap) b;
		c_seq := c_seq || v_useq;
		c_str := c_str || array_fill(0, ARRAY[cardinality(v_useq)]);
		c_dst := c_dst || array_fill(cardinality(d_caps), ARRAY[cardinality(v_useq)]);

		-- Stream candidates: ready streams by turn.
		SELECT coalesce(array_agg(stream ORDER BY turn), '{}'), coalesce(array_agg(head_seq ORDER BY turn), '{}')
		INTO v_keys, v_heads FROM (
			SELECT s.stream, s.head_seq, s.turn FROM {{T}}streams s
			WHERE s.destination = v_dest AND s.ready
			-- More streams than the cap: a ready stream may give nothing
			-- (its head came due later than it woke), and a small claim,
			-- such as a breaker's probe of one, must not stop there.
			ORDER BY s.turn LIMIT v_cap + 32
			FOR UPDATE OF s SKIP LOCKED) x;
		v_n := cardinality(v_keys);
		v_left := v_cap;
		FOR v_i IN 1..v_n LOOP
			EXIT WHEN v_left <= 0;
			v_take := '{}';
			v_first := NULL;
			v_wait := NULL;
			v_state := 0;
			v_seen := 0;
			v_stop := false;
			-- The LIMIT bounds a read and makes the planner walk
			-- outbox_stream_idx in order even for a very deep stream (without
			-- it, a custom plan for a stream holding half the table sorts the
			-- whole stream); a read that ends on it leaves the stream ready.
			FOR r IN
				SELECT o.seq, o.ordering, o.instance_id, o.lease_expiry, o.scheduled_for,
					o.dead_lettered_at, o.stream_released_at
				FROM {{T}}outbox o
				WHERE o.destination = v_dest AND o.stream = v_keys[v_i] AND o.stream <> ''
					AND o.published_at IS NULL AND o.seq >= v_heads[v_i]
				ORDER BY o.destination, o.stream, o.seq -- outbox_stream_idx's order
				LIMIT v_left + 32
			LOOP
				v_seen := v_seen + 1;
				CONTINUE WHEN r.ordering = 'none'; -- unordered: claimed above
				v_first := coalesce(v_first, r.seq);
				v_m := coalesce(r.ordering, v_mode);
				IF r.instance_id IS NOT NULL AND r.lease_expiry > v_now THEN
					v_wait := least(v_wait, r.lease_expiry);
					CONTINUE WHEN v_m = 'none';
					v_stop := true;
					EXIT;
				END IF;
				IF r.dead_lettered_at IS NOT NULL THEN
					v_stop := v_m = 'strict' AND r.stream_released_at IS NULL;
					EXIT WHEN v_stop;
					CONTINUE;
				END IF;
				IF r.scheduled_for > v_now THEN
					v_wait := least(v_wait, r.scheduled_for);
					v_stop := v_m = 'strict' AND r.stream_released_at IS NULL;
					EXIT WHEN v_stop;
					CONTINUE;
				END IF;
				IF cardinality(v_take) >= v_left THEN
					v_state := 1;
					v_stop := true;
					EXIT;
				END IF;
				v_take := v_take || r.seq;
			END LOOP;
			IF NOT v_stop AND v_seen >= v_left + 32 THEN
				v_state := 1; -- the read ended on its LIMIT: more may follow
			END IF;
			IF cardinality(v_take) > 0 THEN
				-- Lock what was read; keep the part before any row another
				-- transaction holds, so no message overtakes an earlier one.
				SELECT coalesce(array_agg(seq ORDER BY seq), '{}') INTO v_locked FROM (
					SELECT o.seq FROM {{T}}outbox o
					WHERE o.seq = ANY(v_take) AND o.published_at IS NULL AND o.dead_lettered_at IS NULL
						AND (o.instance_id IS NULL OR o.lease_expiry <= v_now)
						AND (o.scheduled_for IS NULL OR o.scheduled_for <= v_now)
					FOR UPDATE OF o SKIP LOCKED) x;
				v_got := 0;
				WHILE v_got < cardinality(v_take) AND v_got < cardinality(v_locked)
					AND v_take[v_got + 1] = v_locked[v_got + 1] LOOP
					v_got := v_got + 1;
				END LOOP;
				IF v_got < cardinality(v_take) THEN
					v_state := 2;
					v_take := v_take[1:v_got];
				END IF;
			END IF;
			s_dest := s_dest || v_dest;
			s_key := s_key || v_keys[v_i];
			s_first := s_first || v_first;
			s_wait := s_wait || v_wait;
			s_state := s_state || v_state;
			c_seq := c_seq || v_take;
			c_str := c_str || array_fill(cardinality(s_key), ARRAY[cardinality(v_take)]);
			c_dst := c_dst || array_fill(cardinality(d_caps), ARRAY[cardinality(v_take)]);
			v_left := v_left - cardinality(v_take);
		END LOOP;
	END LOOP;

	-- The lowest seqs win, at most each destination's cap.
	SELECT coalesce(array_agg(seq ORDER BY seq), '{}') INTO v_final FROM (
		SELECT x.seq FROM (
			SELECT c.seq, row_number() OVER (PARTITION BY c.d ORDER BY c.seq) AS rn, d_caps[c.d] AS cap
			FROM unnest(c_seq, c_dst) AS c(seq, d)) x
		WHERE x.rn <= x.cap ORDER BY x.seq LIMIT p_limit) y;
	RETURN QUERY
	UPDATE {{T}}outbox o SET instance_id = p_instance, lease_expiry = v_expiry
	WHERE o.seq = ANY(v_final)
	RETURNING o.*;

	-- Each stream read waits, or stays ready for its next turn. Nothing
	-- left: writers hold a stream row until they commit, so none is
	-- writing to the stream now and the row goes.
	WITH st AS (
		SELECT s.i, s.dest, s.key, s.first, s.wait, s.state,
			count(c.seq) AS sn, count(c.seq) FILTER (WHERE c.seq = ANY(v_final)) AS got
		FROM unnest(s_dest, s_key, s_first, s_wait, s_state) WITH ORDINALITY AS s(dest, key, first, wait, state, i)
		LEFT JOIN unnest(c_seq, c_str) AS c(seq, si) ON c.si = s.i
		GROUP BY s.i, s.dest, s.key, s.first, s.wait, s.state
	), gone AS (
		DELETE FROM {{T}}streams t USING st
		WHERE st.first IS NULL AND t.destination = st.dest AND t.stream = st.key
	)
	UPDATE {{T}}streams t SET head_seq = st.first,
		ready = (st.got < st.sn OR st.state <> 0),
		turn = CASE WHEN st.got >= st.sn AND st.state <> 0 THEN nextval('{{T}}streams_turn') ELSE t.turn END,
		wait_until = CASE WHEN st.got < st.sn OR st.state <> 0 THEN NULL
			WHEN st.got > 0 THEN least(st.wait, v_expiry) ELSE st.wait END
	FROM st WHERE st.first IS NOT NULL AND t.destination = st.dest AND t.stream = st.key;
END
$$;

-- {{T}}claim_destinations lists the destinations that may have something
-- to claim: those of ready streams and of unordered messages (skip scans of
-- their indexes: one probe per destination), and of due unordered retries
-- and lapsed unordered leases.
CREATE FUNCTION {{T}}claim_destinations(p_now timestamptz) RETURNS TABLE (destination text)
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
	)
	SELECT rs.destination FROM rs WHERE rs.destination IS NOT NULL
	UNION
	SELECT us.destination FROM us WHERE us.destination IS NOT NULL
	UNION
	SELECT d.destination FROM (SELECT o.destination FROM {{T}}outbox o
		WHERE o.published_at IS NULL AND o.dead_lettered_at IS NULL
			AND o.instance_id IS NULL AND o.scheduled_for IS NOT NULL AND o.scheduled_for <= p_now
			AND (o.stream = '' OR o.ordering = 'none')
		ORDER BY o.scheduled_for LIMIT 1000) d
	UNION
	SELECT e.destination FROM (SELECT o.destination FROM {{T}}outbox o
		WHERE o.instance_id IS NOT NULL AND o.lease_expiry <= p_now
			AND o.published_at IS NULL AND o.dead_lettered_at IS NULL
			AND (o.stream = '' OR o.ordering = 'none')
		ORDER BY o.lease_expiry LIMIT 1000) e
$$;
