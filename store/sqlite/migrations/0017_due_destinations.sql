-- A claim finds every destination with an unordered retry due or an
-- unordered lease lapsed, whatever else is due or lapsed. It read the
-- first 1,000 rows of outbox_scheduled due by now (outbox_lease lapsed
-- by now) and only then kept the unordered, claimable ones: a published
-- retry keeps its scheduled_for (Get reports it), and published messages
-- kept under Retention, ordered retries and retries in flight filled
-- those 1,000, so that after 1,100 delivered retries of destination a a
-- due retry of destination b was not claimed until something else
-- brought b up; 1,100 due retries or lapsed leases of a destination the
-- claim excludes did the same. The unordered candidates of a destination
-- read the same rows, for every destination.
-- Two partial indexes hold only what a claim can take, by destination:
--   outbox_due:   unordered retries not leased, by due time;
--   outbox_lapse: unordered leases, by expiry.
-- A claim finds their destinations with a skip scan (two probes per
-- destination that has any) and reads a destination's due retries and
-- lapsed leases as one range each. Fresh messages enter neither.
CREATE INDEX {{prefix}}outbox_due ON {{prefix}}outbox (destination, scheduled_for)
    WHERE (status & 4) = 0 AND dead_lettered_at IS NULL AND instance_id IS NULL AND scheduled_for IS NOT NULL
      AND (CASE WHEN stream = '' THEN 1 WHEN ordering = 'none' THEN 1 ELSE 0 END) = 1;

CREATE INDEX {{prefix}}outbox_lapse ON {{prefix}}outbox (destination, lease_expiry)
    WHERE (status & 4) = 0 AND dead_lettered_at IS NULL AND instance_id IS NOT NULL
      AND (CASE WHEN stream = '' THEN 1 WHEN ordering = 'none' THEN 1 ELSE 0 END) = 1;
