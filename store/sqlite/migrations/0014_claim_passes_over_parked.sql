-- A stream's read passes over its parked messages instead of reading
-- them (heads.go, streamread.go). A parked message is one not leased and
-- dead-lettered or scheduled for a retry. The read took every undelivered
-- message of the stream from its head along outbox_stream and stepped
-- over the parked ones that do not hold the stream (ordering release,
-- strict streams released past them): 200,000 of them before the live
-- messages cost each claim ~0.4 s inside the one write transaction. Four
-- indexes split the stream instead, so that the read costs what it takes:
--   outbox_stream_live:     what the read walks: neither dead-lettered nor
--                           scheduled (fresh messages, leased or not);
--   outbox_stream_inflight: the dead-lettered or scheduled messages under
--                           a lease (a retry being delivered, a message
--                           dead-lettered by hand in flight), walked
--                           beside it;
--   outbox_stream_retry:    parked retries by due time: those due are
--                           claimable, the earliest not due wakes the
--                           stream;
--   outbox_stream_hold:     parked messages that hold a strict stream (not
--                           released past, ordering strict or the
--                           destination's), by ordering, so that a claim
--                           finds the first of them with one probe: the
--                           read stops there.
-- Messages of ordering none are claimed as unordered and are in none of
-- them. A fresh message of a stream enters outbox_stream_live only, and a
-- lease does not touch it: no predicate of live names instance_id or
-- lease_expiry (a first version counted leased messages as live, and every
-- lease rewrote the entry: 0.8x on insert-and-work over strict streams).
CREATE INDEX {{prefix}}outbox_stream_live ON {{prefix}}outbox (destination, stream, seq)
    WHERE (status & 4) = 0 AND stream <> '' AND coalesce(ordering, '') <> 'none'
      AND dead_lettered_at IS NULL AND scheduled_for IS NULL;

CREATE INDEX {{prefix}}outbox_stream_inflight ON {{prefix}}outbox (destination, stream, seq)
    WHERE (status & 4) = 0 AND stream <> '' AND coalesce(ordering, '') <> 'none'
      AND instance_id IS NOT NULL AND (dead_lettered_at IS NOT NULL OR scheduled_for IS NOT NULL);

CREATE INDEX {{prefix}}outbox_stream_retry ON {{prefix}}outbox (destination, stream, scheduled_for)
    WHERE (status & 4) = 0 AND stream <> '' AND coalesce(ordering, '') <> 'none'
      AND instance_id IS NULL AND dead_lettered_at IS NULL AND scheduled_for IS NOT NULL;

CREATE INDEX {{prefix}}outbox_stream_hold ON {{prefix}}outbox (destination, stream, coalesce(ordering, ''), seq)
    WHERE (status & 4) = 0 AND stream <> '' AND instance_id IS NULL AND stream_released_at IS NULL
      AND coalesce(ordering, '') IN ('', 'strict')
      AND (dead_lettered_at IS NOT NULL OR scheduled_for IS NOT NULL);
