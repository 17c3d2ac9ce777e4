-- Backstop's PostgreSQL schema, version 9 ({{T}} and {{P}} as in 0001): the
-- ready streams share a claim. The claim read them in turn and let the
-- first take all that was left of its cap, so a claim of 256 could be one
-- deep stream's next 256 messages; the relay, which sends a strict stream's
-- messages one at a time, each once the one before is recorded, then had a
-- handful of streams in flight and its workers idle (a third of the
-- throughput on 100 strict streams). Now each ready stream read gives at
-- most an equal share of the cap, at least 16; a stream with more stays
-- ready and takes a new turn, behind the others (SQLite's claim does the
-- same, and also hands what is left to such streams in a second read). The
-- function is otherwise 0003's, with 0008's enable_seqscan = off.
CREATE OR REPLACE FUNCTION {{T}}claim(p_now timestamptz, p_instance text, p_limit int, p_lease_us bigint,
	p_only text[], p_skip text[], p_policy_dests text[], p_policy_modes text[], p_default_mode text,
	p_cap_dests text[], p_caps int[])
RETURNS SETOF {{T}}outbox
LANGUAGE plpgsql VOLATILE
SET jit = off
SET enable_seqscan = off
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
	v_share  int; -- what one stream may give: its share of the cap
	v_room   int; -- what this stream may give: v_left, at most v_share
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
		-- The ready streams share the cap: each gives at most an equal
		-- share (at least 16), so that one deep stream never takes the
		-- whole claim; a stream with more stays ready for the next.
		v_share := least(v_cap, greatest((v_cap + greatest(v_n, 1) - 1) / greatest(v_n, 1), 16));
		FOR v_i IN 1..v_n LOOP
			EXIT WHEN v_left <= 0;
			v_take := '{}';
			v_room := least(v_left, v_share);
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
				LIMIT v_room + 32
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
				IF cardinality(v_take) >= v_room THEN
					v_state := 1;
					v_stop := true;
					EXIT;
				END IF;
				v_take := v_take || r.seq;
			END LOOP;
			IF NOT v_stop AND v_seen >= v_room + 32 THEN
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
