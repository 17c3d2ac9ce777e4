-- Backstop's PostgreSQL schema, version 19 ({{T}} and {{P}} as in 0001):
-- the dead-letter list's filters by fingerprint and by stream have
-- indexes in the list's order (failure_time, id), as the plain list has.
-- Each read the whole table: at 200,000 entries a fingerprint filter took
-- about 280 ms a page, and a bulk action by fingerprint paid it on every
-- page of 500. Entries are written only when messages fail for good.

-- backstop:build-concurrently
CREATE INDEX CONCURRENTLY IF NOT EXISTS {{P}}dead_letters_fingerprint_idx ON {{T}}dead_letters (fingerprint, failure_time, id);
CREATE INDEX CONCURRENTLY IF NOT EXISTS {{P}}dead_letters_stream_idx ON {{T}}dead_letters (destination, stream, failure_time, id);
