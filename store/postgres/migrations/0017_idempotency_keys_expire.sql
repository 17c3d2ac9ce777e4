-- Backstop's PostgreSQL schema, version 17 ({{T}} and {{P}} as in 0001):
-- idempotency keys expire. A key was kept for ever, one row for every
-- message a topic fanned out and every keyed request; the fleet's leader
-- now deletes the keys older than store.Config.IdempotencyWindow, oldest
-- first, through this index.
CREATE INDEX {{P}}idempotency_keys_created_idx ON {{T}}idempotency_keys (created_at);
