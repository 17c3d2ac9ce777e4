-- Backstop's PostgreSQL schema, version 23 ({{T}} and {{P}} as in 0001):
-- the dead-letter list's filters by status and by reason have indexes in
-- the list's order (failure_time, id), as 0019 gave the filters by
-- fingerprint and stream. Listing the resolved or replayed entries (the
-- dashboard's and the CLI's --status) walked the time index over every
-- other entry to find a page, and a filter by reason read the whole
-- table. Entries are written only when messages fail for good, and
-- change status only by an operator's action.

-- backstop:build-concurrently
CREATE INDEX CONCURRENTLY IF NOT EXISTS {{P}}dead_letters_status_idx ON {{T}}dead_letters (status, failure_time, id);
CREATE INDEX CONCURRENTLY IF NOT EXISTS {{P}}dead_letters_reason_idx ON {{T}}dead_letters (reason, failure_time, id);
