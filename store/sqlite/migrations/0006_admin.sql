-- The admin API's tables (admin.go).

-- Idempotency keys of enqueued messages: a key is used once; the ids it
-- wrote are returned to a repeated request. Kept apart from the outbox,
-- whose rows are deleted on delivery.
CREATE TABLE {{prefix}}idempotency_keys (
    key         TEXT    PRIMARY KEY,
    message_ids TEXT    NOT NULL, -- JSON array of ids
    created_at  INTEGER NOT NULL
);

-- Operators' actions, newest first by id.
CREATE TABLE {{prefix}}audit (
    id     INTEGER PRIMARY KEY AUTOINCREMENT,
    at     INTEGER NOT NULL,
    actor  TEXT    NOT NULL,
    action TEXT    NOT NULL,
    target TEXT    NOT NULL DEFAULT '',
    filter TEXT    NOT NULL DEFAULT '',
    count  INTEGER NOT NULL DEFAULT 0,
    notes  TEXT    NOT NULL DEFAULT ''
);

CREATE INDEX {{prefix}}audit_target ON {{prefix}}audit (target, id) WHERE target <> '';
