-- Backstop's PostgreSQL schema, version 18 ({{T}} and {{P}} as in 0001):
-- the dead-lettered messages still in the outbox, by stream, for the
-- blocked-streams gauge (gauges.go). It found them through their
-- dead-letter entries, a join PostgreSQL planned as a scan of the whole
-- outbox: with 1M rows and 100k dead-lettered the gauges took 20-37 s, and
-- every reading of the fleet's leader timed out. Rows enter this index
-- only when they are dead-lettered, so writers and claims pay nothing.

-- backstop:build-concurrently
CREATE INDEX CONCURRENTLY IF NOT EXISTS {{P}}outbox_dead_idx ON {{T}}outbox (destination, stream, seq)
	WHERE dead_lettered_at IS NOT NULL AND published_at IS NULL;
