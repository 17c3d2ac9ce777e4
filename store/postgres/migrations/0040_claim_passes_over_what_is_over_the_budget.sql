-- Backstop's PostgreSQL schema, version 40 ({{T}} and {{P}} as in 0001):
-- a message over the claim's byte budget no longer holds back the others.
--
-- A claim without p_first_any (the relay holds a message larger than its
-- budget) stopped at the first candidate larger than p_max_bytes: no
-- candidate after it in seq order won, of any stream or destination, until
-- the held message's delivery ended. With a small budget and a slow
-- destination, a run of large messages for it kept every other
-- destination waiting for each delivery in turn. Such a candidate is now
-- passed over, with the later candidates of its stream, so that what a
-- claim takes of a stream is still a prefix; the others win as before,
-- their bytes counted without it. With p_first_any nothing changes.
--
-- The claim function is otherwise 0039's.

CREATE OR REPLACE FUNCTION {{T}}claim(p_now timestamptz, p_instance text, p_limit int, p_lease_us bigint,
	p_only text[], p_skip text[], p_policy_dests text[], p_policy_modes text[], p_default_mode text,
	p_cap_dests text[], p_caps int[], p_max_bytes bigint, p_first_any boolean)
RETURNS SETOF {{T}}outbox
LANGUAGE plpgsql VOLATILE
SET jit = off
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
SET enable_bitmapscan = off
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
	c_len    bigint[] := '{}'; -- each candidate's bytes: payload and headers
	c_bytes  bigint := 0;      -- theirs in all, with 512 each
	c_won    boolean[]; -- each candidate leased or not, as c_seq
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
	v_ulen   bigint[];
	v_take   bigint[];
	v_tlen   bigint[];
	v_final  bigint[];
	v_n      int;
	v_left   int;    -- what is left of the cap for the streams' chunks
	v_want   int;    -- how many ready streams the next chunk locks
	v_locked int;    -- how many ready streams the chunks locked
	v_last   bigint; -- the last turn a chunk locked
	v_turn   bigint;
	v_base   int;
	v_ri     bigint[];
	v_rfirst bigint[];
	v_rwait  timestamptz[];
	v_rstate int[];
	v_ti     bigint[];
	v_cut    bigint[];
	v_share  int; -- what one stream may give: its share of the cap
	v_rn     int; -- how many streams were read
	v_past   int := 4; -- how far a read looks past its share
	v_i      bigint;
	v_hold   timestamptz; -- until when no lease lapses (clock_steps)
	v_lapse  timestamptz; -- a lease lapsed when its expiry is at or before it
BEGIN
	IF p_limit <= 0 THEN
		RETURN;
	END IF;

	-- A hold after the clock stepped forward (recorded by the statement
	-- before the claim, stepSQL): until it ends no lease lapses, whoever
	-- claims. A step noticed ahead of now was recorded before the clock went
	-- back, and no hold lasts more than an hour from its step (a row
	-- written by hand with a later end holds no longer).
	SELECT max(least(h.held_until, h.noticed_at + interval '1 hour')) INTO v_hold FROM {{T}}clock_steps h
	WHERE h.noticed_at > v_now - interval '1 hour' AND h.noticed_at <= v_now
		AND least(h.held_until, h.noticed_at + interval '1 hour') > v_now;
	v_lapse := CASE WHEN v_hold IS NULL THEN v_now ELSE '-infinity' END;

	-- Streams whose lease or retry time came become ready.
	IF EXISTS (SELECT 1 FROM {{T}}streams w WHERE NOT w.ready AND w.wait_until <= v_now) THEN
		UPDATE {{T}}streams SET ready = true, wait_until = NULL, turn = nextval('{{T}}streams_turn')
		WHERE ctid = ANY(ARRAY(SELECT w.ctid FROM {{T}}streams w
			WHERE NOT w.ready AND w.wait_until <= v_now
			ORDER BY w.wait_until LIMIT 1000 FOR UPDATE SKIP LOCKED));
	END IF;

	-- Wake-ups posted while a stream row was held. One that carries a seq
	-- (a message made to wait in the stream again, such as one given the
	-- stream's ordering by plain SQL) lowers the head to it: reads start at
	-- the head, and the head may have moved past that message while it
	-- was of ordering none.
	IF EXISTS (SELECT 1 FROM {{T}}stream_wakes) THEN
		WITH w AS (
			SELECT id, destination, stream, head_seq FROM {{T}}stream_wakes ORDER BY id LIMIT 1000 FOR UPDATE SKIP LOCKED
		), k AS (
			SELECT destination, stream, min(head_seq) AS lo FROM w GROUP BY destination, stream
		), l AS (
			SELECT s.destination, s.stream, s.ready, s.head_seq, k.lo FROM k
			CROSS JOIN LATERAL (SELECT s.destination, s.stream, s.ready, s.head_seq FROM {{T}}streams s
				WHERE s.destination = k.destination AND s.stream = k.stream
				FOR UPDATE SKIP LOCKED) s
		), u AS (
			UPDATE {{T}}streams s SET ready = true, wait_until = NULL,
				turn = CASE WHEN l.ready THEN s.turn ELSE nextval('{{T}}streams_turn') END,
				head_seq = least(s.head_seq, coalesce(l.lo, s.head_seq))
			FROM l WHERE s.destination = l.destination AND s.stream = l.stream
				AND (NOT l.ready OR l.lo < l.head_seq)
		), g AS (
			-- The woken streams that have no row while messages wait in them:
			-- a writer posted the wake-up while a recording or a claim held
			-- the row it then deleted. Each gets its row back, once no writer
			-- of the stream is between its insert and its commit: its turn row
			-- is taken, SKIP LOCKED (a claim never waits for a writer), and
			-- while a writer holds it the wake-up stays for a later claim.
			SELECT k.destination, k.stream,
				EXISTS (SELECT 1 FROM {{T}}outbox o
					WHERE o.destination = k.destination AND o.stream = k.stream AND o.stream <> ''
						AND o.published_at IS NULL AND o.ordering IS DISTINCT FROM 'none') AS waiting,
				EXISTS (SELECT 1 FROM {{T}}stream_turns t
					WHERE t.destination = k.destination AND t.stream = k.stream) AS turned
			FROM k WHERE NOT EXISTS (SELECT 1 FROM {{T}}streams s
				WHERE s.destination = k.destination AND s.stream = k.stream)
		), t AS (
			SELECT x.destination, x.stream FROM g CROSS JOIN LATERAL (
				SELECT t.destination, t.stream FROM {{T}}stream_turns t
				WHERE t.destination = g.destination AND t.stream = g.stream
				FOR UPDATE SKIP LOCKED) x
			WHERE g.waiting
		), c AS (
			-- (a stream with no turn row either, which only plain SQL that
			-- deleted it leaves, gets its row all the same)
			INSERT INTO {{T}}streams (destination, stream)
			SELECT g.destination, g.stream FROM g
			WHERE g.waiting AND (NOT g.turned
				OR EXISTS (SELECT 1 FROM t WHERE t.destination = g.destination AND t.stream = g.stream))
			ORDER BY g.destination, g.stream
			ON CONFLICT DO NOTHING
			RETURNING destination, stream
		)
		DELETE FROM {{T}}stream_wakes x USING w
		WHERE x.id = w.id AND (
			EXISTS (SELECT 1 FROM l WHERE l.destination = w.destination AND l.stream = w.stream)
			OR EXISTS (SELECT 1 FROM c WHERE c.destination = w.destination AND c.stream = w.stream)
			OR EXISTS (SELECT 1 FROM g WHERE g.destination = w.destination AND g.stream = w.stream AND NOT g.waiting));
	END IF;

	FOR v_dest IN
		SELECT d.destination FROM (
			SELECT unnest(p_only) AS destination WHERE cardinality(p_only) BETWEEN 1 AND 16
			UNION
			-- the first test names no column: the plan gates the branch on
			-- it, so that a claim naming up to 16 destinations never runs
			-- claim_destinations
			SELECT x.destination FROM {{T}}claim_destinations(v_now) x
			WHERE NOT (cardinality(p_only) BETWEEN 1 AND 16)
				AND (cardinality(p_only) = 0 OR x.destination = ANY(p_only))
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
			SELECT c.seq, octet_length(c.payload) + pg_column_size(c.headers) AS len FROM {{T}}outbox c
			WHERE c.destination = v_dest AND c.published_at IS NULL AND c.dead_lettered_at IS NULL
				AND c.instance_id IS NULL AND c.scheduled_for IS NULL
				AND (c.stream = '' OR c.ordering = 'none')
			ORDER BY c.seq LIMIT v_cap
			FOR UPDATE OF c SKIP LOCKED
		), due AS (
			SELECT c.seq, octet_length(c.payload) + pg_column_size(c.headers) AS len FROM {{T}}outbox c
			WHERE c.published_at IS NULL AND c.dead_lettered_at IS NULL
				AND c.instance_id IS NULL AND c.scheduled_for IS NOT NULL
				AND c.scheduled_for <= v_now
				AND c.destination = v_dest AND (c.stream = '' OR c.ordering = 'none')
			ORDER BY c.scheduled_for LIMIT v_cap
			FOR UPDATE OF c SKIP LOCKED
		), expired AS (
			SELECT c.seq, octet_length(c.payload) + pg_column_size(c.headers) AS len FROM {{T}}outbox c
			WHERE c.instance_id IS NOT NULL AND c.lease_expiry <= v_lapse
				AND c.published_at IS NULL AND c.dead_lettered_at IS NULL
				AND (c.scheduled_for IS NULL OR c.scheduled_for <= v_now)
				AND c.destination = v_dest AND (c.stream = '' OR c.ordering = 'none')
			ORDER BY c.lease_expiry LIMIT v_cap
			FOR UPDATE OF c SKIP LOCKED
		)
		-- (one pass over the rows, in no set order: the arrays only need to
		-- match each other; an aggregate's ORDER BY sorts its input again)
		SELECT coalesce(array_agg(seq), '{}'), coalesce(array_agg(len), '{}'), c_bytes + coalesce(sum(len + 512), 0)
		INTO v_useq, v_ulen, c_bytes FROM (
			SELECT seq, len FROM (SELECT seq, len FROM fresh UNION ALL SELECT seq, len FROM due
				UNION ALL SELECT seq, len FROM expired) a
			ORDER BY seq LIMIT v_cap) b;
		c_seq := c_seq || v_useq;
		c_len := c_len || v_ulen;
		c_str := c_str || array_fill(0, ARRAY[cardinality(v_useq)]);
		c_dst := c_dst || array_fill(cardinality(d_caps), ARRAY[cardinality(v_useq)]);

		-- Stream candidates: ready streams by turn, locked and read in
		-- chunks until the cap is filled. A claim over deep streams leases
		-- its cap from the first few (each gives its share), so the first
		-- chunk is as many streams as the cap needs at 16 each, and 32
		-- more; a claim over streams that give one message, or nothing (a
		-- head that came due later than it woke; a small claim, such as a
		-- breaker's probe of one, must not stop there), goes on to chunks
		-- twice as large, up to cap + 32 streams in all.
		v_left := v_cap;
		v_locked := 0;
		v_last := 0; -- turns start at 1
		v_share := NULL;
		v_want := (v_cap + 15) / 16 + 32;
		LOOP
			v_want := least(v_want, v_cap + 32 - v_locked);
			EXIT WHEN v_want <= 0;
			EXIT WHEN v_last = 0 AND NOT EXISTS (SELECT 1 FROM {{T}}streams s WHERE s.destination = v_dest AND s.ready);
			SELECT coalesce(array_agg(stream ORDER BY turn), '{}'), coalesce(array_agg(head_seq ORDER BY turn), '{}'),
				max(turn)
			INTO v_keys, v_heads, v_turn FROM (
				SELECT s.stream, s.head_seq, s.turn FROM {{T}}streams s
				WHERE s.destination = v_dest AND s.ready
					AND s.turn > v_last
				ORDER BY s.turn LIMIT v_want
				FOR UPDATE OF s SKIP LOCKED) x;
			v_n := cardinality(v_keys);
			EXIT WHEN v_n = 0;
			v_locked := v_locked + v_n;
			v_last := v_turn;
			-- The ready streams share the cap: each gives at most an equal
			-- share (at least 16), so that one deep stream never takes the
			-- whole claim; a stream with more stays ready for the next. The
			-- first chunk sets it: it holds every ready stream, or at least
			-- cap / 16 of them, and the share is then 16.
			IF v_share IS NULL THEN
				v_share := least(v_cap, greatest((v_cap + v_n - 1) / v_n, 16));
			END IF;

			-- Every stream is read in one statement: its first v_share +
			-- v_past undelivered rows from its head, in seq order (outbox_stream_idx;
			-- the LIMIT keeps the planner on the index for a deep stream, and
			-- a read that ends on it leaves the stream ready). A row is
			--   unord:   ordering 'none', claimed by the unordered branch and
			--            passed over here;
			--   blocker: one the stream stops at: a live lease (a lease under
			--            ordering none is passed over, not read), or, in strict
			--            mode and not released, a dead letter or a retry not
			--            yet due;
			--   elig:    claimable: no live lease, not dead-lettered, due.
			-- Streams take their turn in order: each gives its claimable rows
			-- before its first blocker, at most its room (its share, or what
			-- the streams before it left of the cap; the streams past the cap
			-- are not read). A stream stops at its first blocker or at the
			-- claimable row past its room; its wait is the earliest lease
			-- expiry or due time up to there.
			WITH k AS (
				SELECT k.*,
					-- Under strict ordering, the stream's first dead letter below
					-- its head that holds it (outbox_dead_hold_idx): a read moves
					-- the head past the dead letters that do not hold the stream,
					-- and one passed over under release ordering holds it once the
					-- destination's ordering is strict. Such a stream gives nothing
					-- and waits at it.
					CASE WHEN v_mode = 'strict' THEN (SELECT d.seq FROM {{T}}outbox d
						WHERE d.destination = v_dest AND d.stream = k.key AND d.stream <> ''
							AND d.dead_lettered_at IS NOT NULL AND d.published_at IS NULL
							AND d.stream_released_at IS NULL AND d.ordering IS NULL
							AND d.seq < k.head
						ORDER BY d.destination, d.stream, d.seq LIMIT 1) END AS hold_lo
				FROM unnest(v_keys, v_heads) WITH ORDINALITY AS k(key, head, i)
			), rd0 AS (
				SELECT k.i, k.hold_lo, o.seq,
					coalesce(o.ordering = 'none', false) AS unord,
					coalesce(o.ordering, v_mode) AS m,
					coalesce(o.instance_id IS NOT NULL AND o.lease_expiry > v_lapse, false) AS leased,
					o.lease_expiry, o.scheduled_for,
					o.dead_lettered_at IS NOT NULL AS dead,
					o.stream_released_at IS NOT NULL AS released,
					o.len
				FROM k LEFT JOIN LATERAL (
					SELECT o.seq, o.ordering, o.instance_id, o.lease_expiry, o.scheduled_for,
						o.dead_lettered_at, o.stream_released_at,
						octet_length(o.payload) + pg_column_size(o.headers) AS len
					FROM {{T}}outbox o
					WHERE o.destination = v_dest AND o.stream = k.key AND o.stream <> ''
						AND o.published_at IS NULL AND o.seq >= k.head AND k.hold_lo IS NULL
						-- a dead letter that does not hold the stream is passed
						-- over, not read: it must not fill the read; one still
						-- leased (dead-lettered by hand while a relay delivers
						-- it) is read, for its lease holds the stream
						AND (o.dead_lettered_at IS NULL
							OR (coalesce(o.ordering, v_mode) = 'strict' AND o.stream_released_at IS NULL)
							OR (o.instance_id IS NOT NULL AND o.lease_expiry > v_lapse))
						-- so is a retry not yet due that does not hold it
						-- (anything but strict and not released): the waits below find it
						AND NOT coalesce(o.dead_lettered_at IS NULL AND o.instance_id IS NULL
							AND o.scheduled_for > v_now AND o.ordering IS DISTINCT FROM 'none'
							AND NOT (coalesce(o.ordering, v_mode) = 'strict' AND o.stream_released_at IS NULL), false)
						-- and a live lease that does not hold it (ordering
						-- none): the leases below find it
						AND NOT coalesce(o.instance_id IS NOT NULL AND o.lease_expiry > v_lapse
							AND coalesce(o.ordering, v_mode) = 'none', false)
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
					WHERE o.destination = v_dest AND o.stream = k.key AND o.stream <> '' AND k.hold_lo IS NULL
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
				SELECT i, seen, least(v_share::bigint, v_left - coalesce(sum(least(avail, v_share)) OVER (
					ORDER BY i ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)) AS room
				FROM per
			), rr AS (
				SELECT run.*, rooms.room, rooms.seen FROM run JOIN rooms USING (i) WHERE rooms.room > 0
			), stop AS (
				SELECT i, min(seq) FILTER (WHERE blocker OR (elig AND bb = 0 AND ek = room + 1)) AS at,
					bool_or(elig AND bb = 0 AND ek = room + 1) AS full
				FROM rr GROUP BY i
			), leases AS (
				-- The leases the read passed over (destination ordering none),
				-- up to where it ended, of the streams that take their turn:
				-- the first of a message whose own ordering is unset keeps the
				-- head (a release gives it back to this stream; one of
				-- ordering none goes back to the unordered claim), the earliest
				-- expiry wakes the stream. Only outbox_stream_idx serves it:
				-- from outbox_lease_idx (the earliest expiry as a min() of the
				-- table, or a bitmap of every live lease) its cost grew with
				-- the leases of every other stream, so the lease test is
				-- wrapped and the min() taken over an ordered read.
				SELECT k.i, l.lo, l.due
				FROM k JOIN rng USING (i) JOIN rooms USING (i) CROSS JOIN LATERAL (
					SELECT min(x.seq) AS lo, min(greatest(x.lease_expiry, v_hold)) AS due FROM (
						SELECT o.seq, o.lease_expiry FROM {{T}}outbox o
						WHERE o.destination = v_dest AND o.stream = k.key AND o.stream <> ''
							AND o.published_at IS NULL
							-- a bound the index scan stops at, not a filter
							AND o.seq >= k.head AND o.seq <= CASE WHEN rng.n < v_share + v_past
								THEN 9223372036854775807 ELSE rng.hi END
							AND coalesce(o.instance_id IS NOT NULL AND o.lease_expiry > v_lapse
								AND o.ordering IS NULL, false)
						ORDER BY o.destination, o.stream, o.seq) x) l
				WHERE v_mode = 'none' AND rooms.room > 0 AND l.lo IS NOT NULL
			), st AS (
				SELECT rr.i,
					least(coalesce(min(rr.seq) FILTER (WHERE NOT rr.unord),
						-- only rows claimed elsewhere were read: move past them
						CASE WHEN max(rr.seen) >= v_share + v_past THEN max(rr.seq) END),
						min(rr.hold_lo), min(rr.wait_lo), min(ls.lo)) AS first,
					least(min(least(CASE WHEN rr.leased THEN greatest(rr.lease_expiry, v_hold) END,
						CASE WHEN NOT rr.leased AND NOT rr.dead AND rr.scheduled_for > v_now THEN rr.scheduled_for END))
						FILTER (WHERE NOT rr.unord AND rr.seq <= coalesce(stop.at, rr.seq)),
						min(rr.wait_due), min(ls.due)) AS wait,
					CASE WHEN bool_or(stop.full) THEN 1
						WHEN max(stop.at) IS NULL AND max(rr.seen) >= v_share + v_past THEN 1
						ELSE 0 END AS state
				FROM rr JOIN stop USING (i) LEFT JOIN leases ls USING (i) GROUP BY rr.i
			), tk AS (
				SELECT rr.i, rr.seq, rr.len FROM rr WHERE rr.elig AND rr.bb = 0 AND rr.ek <= rr.room
			)
			SELECT (SELECT coalesce(array_agg(i ORDER BY i), '{}') FROM st),
				(SELECT coalesce(array_agg(first ORDER BY i), '{}') FROM st),
				(SELECT coalesce(array_agg(wait ORDER BY i), '{}') FROM st),
				(SELECT coalesce(array_agg(state ORDER BY i), '{}') FROM st),
				-- (one pass: the arrays only need to match each other)
				x.seqs, x.iss, x.lens
			FROM (SELECT coalesce(array_agg(seq), '{}') AS seqs, coalesce(array_agg(i), '{}') AS iss,
				coalesce(array_agg(len), '{}') AS lens FROM tk) x
			INTO v_ri, v_rfirst, v_rwait, v_rstate, v_take, v_ti, v_tlen;

			-- Lock what was read; each stream keeps the part before any row
			-- another transaction holds, so no message overtakes an earlier
			-- one.
			IF cardinality(v_take) > 0 THEN
				WITH lk AS (
					SELECT o.seq FROM {{T}}outbox o
					WHERE o.seq = ANY(v_take) AND o.published_at IS NULL AND o.dead_lettered_at IS NULL
						AND (o.instance_id IS NULL OR o.lease_expiry <= v_lapse)
						AND (o.scheduled_for IS NULL OR o.scheduled_for <= v_now)
					FOR UPDATE OF o SKIP LOCKED
				), t AS (
					SELECT t.seq, t.i, t.len, lk.seq IS NOT NULL AS ok,
						row_number() OVER (PARTITION BY t.i ORDER BY t.seq) AS k
					FROM unnest(v_take, v_ti, v_tlen) AS t(seq, i, len) LEFT JOIN lk ON lk.seq = t.seq
				), cut AS (
					SELECT i, min(k) AS k FROM t WHERE NOT ok GROUP BY i
				)
				SELECT coalesce(array_agg(t.seq) FILTER (WHERE cut.k IS NULL OR t.k < cut.k), '{}'),
					coalesce(array_agg(t.i) FILTER (WHERE cut.k IS NULL OR t.k < cut.k), '{}'),
					coalesce(array_agg(t.len) FILTER (WHERE cut.k IS NULL OR t.k < cut.k), '{}'),
					coalesce(array_agg(DISTINCT t.i) FILTER (WHERE cut.k IS NOT NULL), '{}'),
					c_bytes + coalesce(sum(t.len + 512) FILTER (WHERE cut.k IS NULL OR t.k < cut.k), 0)
				INTO v_take, v_ti, v_tlen, v_cut, c_bytes
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
			c_len := c_len || v_tlen;
			c_str := c_str || ARRAY(SELECT (v_base + x)::int FROM unnest(v_ti) AS x);
			c_dst := c_dst || array_fill(cardinality(d_caps), ARRAY[cardinality(v_take)]);

			v_left := v_left - cardinality(v_take);
			EXIT WHEN v_left <= 0 OR v_n < v_want;
			v_want := v_want * 2;
		END LOOP;
	END LOOP;

	-- The lowest seqs win, at most each destination's cap and p_limit in
	-- all, and while their bytes (with 512 each, store.ClaimOverhead) come
	-- to no more than p_max_bytes; with p_first_any, the first wins
	-- whatever its size. Without it, a candidate larger than p_max_bytes
	-- is passed over, with the later candidates of its stream (held), and
	-- the others go on. c_won marks the winners among the candidates.
	-- When the candidates' bytes in all fit, as they do but for large
	-- messages, the bytes are not counted again.
	IF cardinality(c_seq) > 0 AND (p_max_bytes IS NULL OR c_bytes <= p_max_bytes) THEN
		SELECT coalesce(array_agg(y.seq ORDER BY y.seq) FILTER (WHERE y.won), '{}'),
			coalesce(array_agg(y.won ORDER BY y.k), '{}')
		INTO v_final, c_won FROM (
			SELECT x.seq, x.k, x.inc AND count(*) FILTER (WHERE x.inc) OVER (
				ORDER BY x.seq ROWS UNBOUNDED PRECEDING) <= p_limit AS won
			FROM (
				SELECT c.seq, c.k, row_number() OVER (PARTITION BY c.d ORDER BY c.seq) <= d_caps[c.d] AS inc
				FROM unnest(c_seq, c_dst) WITH ORDINALITY AS c(seq, d, k)) x) y;
	ELSIF cardinality(c_seq) > 0 THEN
		SELECT coalesce(array_agg(y.seq ORDER BY y.seq) FILTER (WHERE y.won), '{}'),
			coalesce(array_agg(y.won ORDER BY y.k), '{}')
		INTO v_final, c_won FROM (
			SELECT x.seq, x.k, x.inc AND x.n <= p_limit AND NOT x.held
				AND (x.bytes <= p_max_bytes OR (p_first_any AND x.n = 1)) AS won
			FROM (
				SELECT x.seq, x.k, x.inc, x.held,
					count(*) FILTER (WHERE x.inc) OVER w AS n,
					sum(x.len + 512) FILTER (WHERE x.inc AND NOT x.held) OVER w AS bytes
				FROM (
					SELECT x.seq, x.k, x.len, x.inc, NOT p_first_any AND x.inc AND (x.big OR x.si > 0
						AND bool_or(x.inc AND x.big) OVER (PARTITION BY x.si ORDER BY x.seq ROWS UNBOUNDED PRECEDING)) AS held
					FROM (
						SELECT c.seq, c.k, c.len, c.si, c.len + 512 > p_max_bytes AS big,
							row_number() OVER (PARTITION BY c.d ORDER BY c.seq) <= d_caps[c.d] AS inc
						FROM unnest(c_seq, c_dst, c_len, c_str) WITH ORDINALITY AS c(seq, d, len, si, k)) x) x
				WINDOW w AS (ORDER BY x.seq ROWS UNBOUNDED PRECEDING)) x) y;
	END IF;
	IF cardinality(c_seq) > 0 THEN
		RETURN QUERY
		UPDATE {{T}}outbox o SET instance_id = p_instance, lease_expiry = v_expiry
		WHERE o.seq = ANY(v_final)
		RETURNING o.*;
	ELSE
		c_won := '{}';
	END IF;

	-- Each stream read waits, or stays ready for its next turn. Nothing
	-- left: the row goes. A writer whose messages this claim could not
	-- see found the row held by it, and posted a wake-up that gives the
	-- row back.
	IF cardinality(s_key) > 0 THEN
		WITH st AS (
			SELECT s.i, s.dest, s.key, s.first, s.wait, s.state,
				count(c.seq) AS sn, count(c.seq) FILTER (WHERE c.won) AS got
			FROM unnest(s_dest, s_key, s_first, s_wait, s_state) WITH ORDINALITY AS s(dest, key, first, wait, state, i)
			LEFT JOIN unnest(c_seq, c_str, c_won) AS c(seq, si, won) ON c.si = s.i
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
	END IF;

	-- A claim that leased no message read from a stream, in a transaction
	-- whose caller renews none and records nothing (it says so with
	-- backstop.lazy_commit), commits without waiting for the disk.
	IF current_setting('backstop.lazy_commit', true) = 'on'
		AND NOT EXISTS (SELECT 1 FROM unnest(c_str, c_won) AS c(si, won) WHERE c.won AND c.si > 0) THEN
		PERFORM set_config('synchronous_commit', 'off', true);
	END IF;
END
$$;
