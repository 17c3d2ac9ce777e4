-- A claim finds every destination with an unordered retry due, whatever
-- else is due. It read the first 1,000 rows of outbox_scheduled due by now
-- and only then kept the unordered, claimable ones: a published retry
-- keeps its scheduled_for (Get reports it), and published messages kept
-- under Retention, ordered retries and retries in flight filled those
-- 1,000, so that after 1,100 delivered retries of destination a a due
-- retry of destination b was not claimed until something else brought b
-- up; 1,100 due retries of a destination the claim excludes did the same.
-- outbox_due holds only unordered retries not leased, by destination and
-- due time: a claim finds their destinations with a skip scan (two probes
-- per destination that has any) and reads a destination's due retries as
-- one range. Fresh messages and leases never enter it. (Lapsed leases,
-- which had the same flaw, are read through outbox_lease without the cut
-- instead: an index of unordered leases would cost every message an entry
-- written at its lease and removed at its delivery.)
CREATE INDEX {{prefix}}outbox_due ON {{prefix}}outbox (destination, scheduled_for)
    WHERE (status & 4) = 0 AND dead_lettered_at IS NULL AND instance_id IS NULL AND scheduled_for IS NOT NULL
      AND (CASE WHEN stream = '' THEN 1 WHEN ordering = 'none' THEN 1 ELSE 0 END) = 1;
