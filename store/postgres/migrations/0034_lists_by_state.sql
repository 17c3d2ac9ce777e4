-- Backstop's PostgreSQL schema, version 34 ({{T}} and {{P}} as in 0001):
-- a list of the messages waiting for a retry, or of the dead-lettered ones
-- (the admin API's GET /v1/messages?state=, the dashboard's messages page,
-- backstop messages list --state), reads those messages in seq order. It
-- walked the outbox's key and read every row until it had a page: behind
-- 5,000,000 ready messages with none retrying, 5.4 s and 104,594 buffers;
-- the dead letters' list read the whole table, 1.1 s
-- (TestListByStateReadsOnlyThatState). Fresh messages enter neither: a
-- message is in the first from its first failure until it is delivered or
-- dead-lettered, and in the second while it is dead-lettered.

-- backstop:build-concurrently
CREATE INDEX CONCURRENTLY IF NOT EXISTS {{P}}outbox_retrying_idx ON {{T}}outbox (seq)
	WHERE published_at IS NULL AND dead_lettered_at IS NULL AND (status & 32768) <> 0;
CREATE INDEX CONCURRENTLY IF NOT EXISTS {{P}}outbox_dead_seq_idx ON {{T}}outbox (seq)
	WHERE dead_lettered_at IS NOT NULL;
