-- Dead-letter lifecycle: an entry is pending, replayed or resolved, and
-- records who replayed or resolved it and why. SQLite cannot change a CHECK
-- constraint in place, so the table is rebuilt; entries already replayed
-- become 'replayed' (unless resolved since).
CREATE TABLE {{prefix}}dead_letters_v3 (
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
    status             TEXT    NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'replayed', 'resolved')),
    resolution_notes   TEXT    NOT NULL DEFAULT '',
    resolved_by        TEXT    NOT NULL DEFAULT '',
    resolved_at        INTEGER,
    replayed           INTEGER NOT NULL DEFAULT 0,
    replayed_by        TEXT    NOT NULL DEFAULT '',
    replay_notes       TEXT    NOT NULL DEFAULT '',
    replayed_at        INTEGER
);

INSERT INTO {{prefix}}dead_letters_v3 (id, task_instance_id, task_id, dag_run_id, dag_id, message_id, destination,
    stream, type, payload, headers, seq, failure_reason, reason, failure_time, first_failure_time, attempts,
    last_attempt_time, error_message, fingerprint, metadata, status, resolution_notes, resolved_at, replayed,
    replayed_at)
SELECT id, task_instance_id, task_id, dag_run_id, dag_id, message_id, destination,
    stream, type, payload, headers, seq, failure_reason, reason, failure_time, first_failure_time, attempts,
    last_attempt_time, error_message, fingerprint, metadata,
    CASE WHEN status = 'pending' AND replayed <> 0 THEN 'replayed' ELSE status END,
    resolution_notes, resolved_at, replayed, replayed_at
FROM {{prefix}}dead_letters;

DROP TABLE {{prefix}}dead_letters;
ALTER TABLE {{prefix}}dead_letters_v3 RENAME TO {{prefix}}dead_letters;

CREATE INDEX {{prefix}}dead_letters_time ON {{prefix}}dead_letters (failure_time, id);
CREATE INDEX {{prefix}}dead_letters_message ON {{prefix}}dead_letters (message_id)
    WHERE message_id <> '';
-- The queue's depth (Count, gauges): pending entries.
CREATE INDEX {{prefix}}dead_letters_pending ON {{prefix}}dead_letters (failure_time)
    WHERE status = 'pending';
