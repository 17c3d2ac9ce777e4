-- Idempotency keys expire: a key was kept for ever, one row for every
-- message a topic fanned out and every keyed request; the fleet's leader
-- now deletes the keys older than store.Config.IdempotencyWindow, oldest
-- first, through this index.
CREATE INDEX {{prefix}}idempotency_keys_created_idx ON {{prefix}}idempotency_keys (created_at);
