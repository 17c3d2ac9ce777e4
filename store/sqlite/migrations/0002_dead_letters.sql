-- The dead-letter queue (dlq.go): one row per dlq.Entry. Outbox messages
-- keep a copy of the message; workflow tasks fill the task columns. Times
-- are unix milliseconds.
CREATE TABLE {{prefix}}dead_letters (
    id                 TEXT    PRIMARY KEY,
    task_instance_id   TEXT    NOT NULL DEFAULT '',
    task_id            TEXT    NOT NULL DEFAULT '',
    dag_run_id         TEXT    NOT NULL DEFAULT '',
    dag_id             TEXT    NOT NULL DEFAULT '',
    message_id         TEXT    NOT NULL DEFAULT '',
    destination        TEXT    NOT NULL DEFAULT '',
    stream             TEXT    NOT NULL DEFAULT '',
    type               TEXT    NOT NULL DEFAULT '',
    payload            BLOB,
    headers            TEXT    NOT NULL DEFAULT '{}',
    seq                INTEGER NOT NULL DEFAULT 0,
    failure_reason     TEXT    NOT NULL DEFAULT '',
    reason             INTEGER NOT NULL DEFAULT 99,
    failure_time       INTEGER NOT NULL,
    first_failure_time INTEGER,
    attempts           INTEGER NOT NULL DEFAULT 0,
    last_attempt_time  INTEGER,
    error_message      TEXT    NOT NULL DEFAULT '',
    fingerprint        TEXT    NOT NULL DEFAULT '',
    metadata           TEXT    NOT NULL DEFAULT '{}',
    status             TEXT    NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'resolved')),
    resolution_notes   TEXT    NOT NULL DEFAULT '',
    resolved_at        INTEGER,
    replayed           INTEGER NOT NULL DEFAULT 0,
    replayed_at        INTEGER
);

-- Listing and cursor pagination by (failure_time, id); PurgeBefore.
CREATE INDEX {{prefix}}dead_letters_time ON {{prefix}}dead_letters (failure_time, id);

-- The entries of one outbox message (replay, delete).
CREATE INDEX {{prefix}}dead_letters_message ON {{prefix}}dead_letters (message_id)
    WHERE message_id <> '';
