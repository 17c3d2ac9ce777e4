-- Backstop's PostgreSQL schema, version 20 ({{T}} and {{P}} as in 0001):
-- messages that do not hold their stream no longer stall it. The claim
-- reads a stream's share plus a few rows from its head (0011: 20 with the
-- default share of 16), and the head stays at the first message not
-- delivered. Two kinds of message at the head neither hold the stream nor
-- can be claimed, and more of them than one read takes filled every read:
--   - dead letters that do not hold the stream (release or none ordering,
--     strict once the stream was released past them): the messages
--     behind them were never claimed again, and the stream was read at
--     every claim;
--   - retries not yet due that do not hold it (the same modes): the later
--     messages waited until those retries came due (hours with seed 000's
--     schedule), where release ordering lets them go on.
-- The read now passes over both. The head stays at the first dead letter
-- passed over (outbox_dead_idx, 0018), so that a replay finds it, and at
-- the first retry passed over, found with the earliest due time through a
-- new index of the messages waiting for a due time, by stream
-- (outbox_stream_due_idx: rows enter it only while scheduled and not
-- leased, so a claim of fresh messages pays nothing for it); that time
-- wakes the stream. A dead letter whose lease is live (dead-lettered by
-- hand while a relay delivers it) is still read: its lease holds the
-- stream until the delivery ends. The function is otherwise 0011's, with
-- 0012's generic plans.

CREATE OR REPLACE FUNCTION {{T}}claim(p_now timestamptz, p_instance text, p_limit int, p_lease_us bigint,
	p_only text[], p_skip text[], p_policy_dests text[], p_policy_modes text[], p_default_mode text,
	p_cap_dests text[], p_caps int[])
RETURNS SETOF {{T}}outbox
LANGUAGE plpgsql VOLATILE
SET jit = off
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
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
	v_final  bigint[];
	v_n      int;
	v_base   int;
	v_ri     bigint[];
	v_rfirst bigint[];
	v_rwait  timestamptz[];
	v_rstate int[];
	v_ti     bigint[];
	v_cut    bigint[];
	v_share  int; -- what one stream may give: its share of the cap
	v_rn     int; -- how many streams were read
	v_past   int;
	v_i      bigint;
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

		-- Stream candidates: ready streams by turn, locked.
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
		CONTINUE WHEN v_n = 0;
		-- The ready streams share the cap: each gives at most an equal
		-- share (at least 16), so that one deep stream never takes the
		-- whole claim; a stream with more stays ready for the next.
		v_share := least(v_cap, greatest((v_cap + v_n - 1) / v_n, 16));
		-- How far a read looks past its share: a stream of ordering none
		-- holds leased messages before claimable ones, which a read must
		-- look past (0009 looked 32 rows past for every stream); a strict
		-- or partial stream stops at its first lease.
		v_past := CASE WHEN v_mode = 'none' THEN 32 ELSE 4 END;

		-- Every stream is read in one statement: its first v_share +
		-- v_past undelivered rows from its head, in seq order (outbox_stream_idx;
		-- the LIMIT keeps the planner on the index for a deep stream, and
		-- a read that ends on it leaves the stream ready). A row is
		--   unord:   ordering 'none', claimed by the unordered branch and
		--            passed over here;
		--   blocker: one the stream stops at: a live lease (unless the
		--            mode is none), or, in strict mode and not released, a
		--            dead letter or a retry not yet due;
		--   elig:    claimable: no live lease, not dead-lettered, due.
		-- Streams take their turn in order: each gives its claimable rows
		-- before its first blocker, at most its room (its share, or what
		-- the streams before it left of the cap; the streams past the cap
		-- are not read). A stream stops at its first blocker or at the
		-- claimable row past its room; its wait is the earliest lease
		-- expiry or due time up to there.
		WITH k AS (
			SELECT k.*,
				-- the stream's first ordered dead letter at or past its head
				-- (outbox_dead_idx): the head stays there however many
				-- the read passes over, so that a replay finds it again
				(SELECT d.seq FROM {{T}}outbox d
					WHERE d.destination = v_dest AND d.stream = k.key AND d.dead_lettered_at IS NOT NULL
						AND d.published_at IS NULL AND d.seq >= k.head AND d.ordering IS DISTINCT FROM 'none'
					ORDER BY d.destination, d.stream, d.seq LIMIT 1) AS dead_lo
			FROM unnest(v_keys, v_heads) WITH ORDINALITY AS k(key, head, i)
		), rd0 AS (
			SELECT k.i, k.dead_lo, o.seq,
				coalesce(o.ordering = 'none', false) AS unord,
				coalesce(o.ordering, v_mode) AS m,
				coalesce(o.instance_id IS NOT NULL AND o.lease_expiry > v_now, false) AS leased,
				o.lease_expiry, o.scheduled_for,
				o.dead_lettered_at IS NOT NULL AS dead,
				o.stream_released_at IS NOT NULL AS released
			FROM k LEFT JOIN LATERAL (
				SELECT o.seq, o.ordering, o.instance_id, o.lease_expiry, o.scheduled_for,
					o.dead_lettered_at, o.stream_released_at
				FROM {{T}}outbox o
				WHERE o.destination = v_dest AND o.stream = k.key AND o.stream <> ''
					AND o.published_at IS NULL AND o.seq >= k.head
					-- a dead letter that does not hold the stream is passed
					-- over, not read: it must not fill the read; one still
					-- leased (dead-lettered by hand while a relay delivers
					-- it) is read, for its lease holds the stream
					AND (o.dead_lettered_at IS NULL
						OR (coalesce(o.ordering, v_mode) = 'strict' AND o.stream_released_at IS NULL)
						OR (o.instance_id IS NOT NULL AND o.lease_expiry > v_now))
					-- so is a retry not yet due that does not hold it
					-- (anything but strict and not released): the waits below find it
					AND NOT coalesce(o.dead_lettered_at IS NULL AND o.instance_id IS NULL
						AND o.scheduled_for > v_now AND o.ordering IS DISTINCT FROM 'none'
						AND NOT (coalesce(o.ordering, v_mode) = 'strict' AND o.stream_released_at IS NULL), false)
				ORDER BY o.destination, o.stream, o.seq -- outbox_stream_idx's order
				LIMIT v_share + v_past) o ON true
		), rng AS (
			SELECT i, count(seq) AS n, max(seq) AS hi FROM rd0 GROUP BY i
		), waits AS (
			-- The retries the read passed over, up to where it ended (the
			-- whole stream if it ended before its limit), through
			-- outbox_stream_due_idx: the first keeps the head (so that it
			-- is read again once due), the earliest due time wakes the
			-- stream.
			SELECT k.i, w.lo, w.due
			FROM k JOIN rng USING (i) CROSS JOIN LATERAL (
				SELECT min(o.seq) AS lo, min(o.scheduled_for) AS due FROM {{T}}outbox o
				WHERE o.destination = v_dest AND o.stream = k.key AND o.stream <> ''
					AND o.published_at IS NULL AND o.dead_lettered_at IS NULL AND o.instance_id IS NULL
					AND o.scheduled_for IS NOT NULL
					AND o.seq >= k.head AND (rng.n < v_share + v_past OR o.seq <= rng.hi)
					AND o.scheduled_for > v_now AND o.ordering IS DISTINCT FROM 'none'
					AND NOT (coalesce(o.ordering, v_mode) = 'strict' AND o.stream_released_at IS NULL)) w
			WHERE w.lo IS NOT NULL
		), rd AS (
			SELECT rd0.*, waits.lo AS wait_lo, waits.due AS wait_due FROM rd0 LEFT JOIN waits USING (i)
		), cl AS (
			SELECT rd.*,
				seq IS NOT NULL AND NOT unord AND CASE
					WHEN leased THEN m <> 'none'
					WHEN dead THEN m = 'strict' AND NOT released
					WHEN coalesce(scheduled_for > v_now, false) THEN m = 'strict' AND NOT released
					ELSE false END AS blocker,
				seq IS NOT NULL AND NOT unord AND NOT leased AND NOT dead
					AND NOT coalesce(scheduled_for > v_now, false) AS elig
			FROM rd
		), run AS (
			SELECT cl.*,
				count(*) FILTER (WHERE elig) OVER w AS ek,
				count(*) FILTER (WHERE blocker) OVER w - blocker::int AS bb
			FROM cl WINDOW w AS (PARTITION BY i ORDER BY seq ROWS UNBOUNDED PRECEDING)
		), per AS (
			SELECT i, count(seq) AS seen, count(*) FILTER (WHERE elig AND bb = 0) AS avail
			FROM run GROUP BY i
		), rooms AS (
			SELECT i, seen, least(v_share::bigint, v_cap - coalesce(sum(least(avail, v_share)) OVER (
				ORDER BY i ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)) AS room
			FROM per
		), rr AS (
			SELECT run.*, rooms.room, rooms.seen FROM run JOIN rooms USING (i) WHERE rooms.room > 0
		), stop AS (
			SELECT i, min(seq) FILTER (WHERE blocker OR (elig AND bb = 0 AND ek = room + 1)) AS at,
				bool_or(elig AND bb = 0 AND ek = room + 1) AS full
			FROM rr GROUP BY i
		), st AS (
			SELECT rr.i,
				least(coalesce(min(rr.seq) FILTER (WHERE NOT rr.unord),
					-- only rows claimed elsewhere were read: move past them
					CASE WHEN max(rr.seen) >= v_share + v_past THEN max(rr.seq) END),
					min(rr.dead_lo), min(rr.wait_lo)) AS first,
				least(min(least(CASE WHEN rr.leased THEN rr.lease_expiry END,
					CASE WHEN NOT rr.leased AND NOT rr.dead AND rr.scheduled_for > v_now THEN rr.scheduled_for END))
					FILTER (WHERE NOT rr.unord AND rr.seq <= coalesce(stop.at, rr.seq)),
					min(rr.wait_due)) AS wait,
				CASE WHEN bool_or(stop.full) THEN 1
					WHEN max(stop.at) IS NULL AND max(rr.seen) >= v_share + v_past THEN 1
					ELSE 0 END AS state
			FROM rr JOIN stop USING (i) GROUP BY rr.i
		), tk AS (
			SELECT rr.i, rr.seq FROM rr WHERE rr.elig AND rr.bb = 0 AND rr.ek <= rr.room
		)
		SELECT (SELECT coalesce(array_agg(i ORDER BY i), '{}') FROM st),
			(SELECT coalesce(array_agg(first ORDER BY i), '{}') FROM st),
			(SELECT coalesce(array_agg(wait ORDER BY i), '{}') FROM st),
			(SELECT coalesce(array_agg(state ORDER BY i), '{}') FROM st),
			(SELECT coalesce(array_agg(seq ORDER BY seq), '{}') FROM tk),
			(SELECT coalesce(array_agg(i ORDER BY seq), '{}') FROM tk)
		INTO v_ri, v_rfirst, v_rwait, v_rstate, v_take, v_ti;

		-- Lock what was read; each stream keeps the part before any row
		-- another transaction holds, so no message overtakes an earlier
		-- one.
		IF cardinality(v_take) > 0 THEN
			WITH lk AS (
				SELECT o.seq FROM {{T}}outbox o
				WHERE o.seq = ANY(v_take) AND o.published_at IS NULL AND o.dead_lettered_at IS NULL
					AND (o.instance_id IS NULL OR o.lease_expiry <= v_now)
					AND (o.scheduled_for IS NULL OR o.scheduled_for <= v_now)
				FOR UPDATE OF o SKIP LOCKED
			), t AS (
				SELECT t.seq, t.i, lk.seq IS NOT NULL AS ok,
					row_number() OVER (PARTITION BY t.i ORDER BY t.seq) AS k
				FROM unnest(v_take, v_ti) AS t(seq, i) LEFT JOIN lk ON lk.seq = t.seq
			), cut AS (
				SELECT i, min(k) AS k FROM t WHERE NOT ok GROUP BY i
			)
			SELECT coalesce(array_agg(t.seq ORDER BY t.seq) FILTER (WHERE cut.k IS NULL OR t.k < cut.k), '{}'),
				coalesce(array_agg(t.i ORDER BY t.seq) FILTER (WHERE cut.k IS NULL OR t.k < cut.k), '{}'),
				coalesce(array_agg(DISTINCT t.i) FILTER (WHERE cut.k IS NOT NULL), '{}')
			INTO v_take, v_ti, v_cut
			FROM t LEFT JOIN cut USING (i);
			FOREACH v_i IN ARRAY v_cut LOOP
				v_rstate[v_i] := 2; -- a candidate was locked: stays ready
			END LOOP;
		END IF;

		-- The streams read are v_ri = 1..n, a prefix of v_keys.
		v_base := cardinality(s_key);
		v_rn := cardinality(v_ri);
		s_dest := s_dest || array_fill(v_dest, ARRAY[v_rn]);
		s_key := s_key || v_keys[1:v_rn];
		s_first := s_first || v_rfirst;
		s_wait := s_wait || v_rwait;
		s_state := s_state || v_rstate;
		c_seq := c_seq || v_take;
		c_str := c_str || ARRAY(SELECT (v_base + x)::int FROM unnest(v_ti) AS x);
		c_dst := c_dst || array_fill(cardinality(d_caps), ARRAY[cardinality(v_take)]);
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

-- backstop:build-concurrently
CREATE INDEX CONCURRENTLY IF NOT EXISTS {{P}}outbox_stream_due_idx ON {{T}}outbox (destination, stream, seq)
	WHERE published_at IS NULL AND dead_lettered_at IS NULL AND instance_id IS NULL
	AND scheduled_for IS NOT NULL AND stream <> '';
