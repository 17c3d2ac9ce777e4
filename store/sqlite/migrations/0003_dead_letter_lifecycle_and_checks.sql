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

-- The outbox refuses values the store cannot read back, so that another
-- language's bug is caught by the INSERT or UPDATE that makes it, with an
-- error naming the column. SQLite cannot add a CHECK constraint to a table,
-- so each column has a trigger on insert and one on update of that column.
-- Rows already present that break these rules are left as they are: the
-- store finds them through the partial index below and dead-letters each
-- (reason SerializationError) at its next batch, so this migration never
-- fails on old data. The predicates match the store's decoder (scan.go).

CREATE TRIGGER {{prefix}}outbox_check_destination_insert BEFORE INSERT ON {{prefix}}outbox
    WHEN typeof(NEW.destination) <> 'text' OR NEW.destination = ''
BEGIN SELECT RAISE(ABORT, 'backstop: outbox.destination must be non-empty text'); END;
CREATE TRIGGER {{prefix}}outbox_check_destination_update BEFORE UPDATE OF destination ON {{prefix}}outbox
    WHEN typeof(NEW.destination) <> 'text' OR NEW.destination = ''
BEGIN SELECT RAISE(ABORT, 'backstop: outbox.destination must be non-empty text'); END;

CREATE TRIGGER {{prefix}}outbox_check_type_insert BEFORE INSERT ON {{prefix}}outbox
    WHEN typeof(NEW.type) <> 'text' OR NEW.type = ''
BEGIN SELECT RAISE(ABORT, 'backstop: outbox.type must be non-empty text'); END;
CREATE TRIGGER {{prefix}}outbox_check_type_update BEFORE UPDATE OF type ON {{prefix}}outbox
    WHEN typeof(NEW.type) <> 'text' OR NEW.type = ''
BEGIN SELECT RAISE(ABORT, 'backstop: outbox.type must be non-empty text'); END;

CREATE TRIGGER {{prefix}}outbox_check_stream_insert BEFORE INSERT ON {{prefix}}outbox
    WHEN typeof(NEW.stream) <> 'text'
BEGIN SELECT RAISE(ABORT, 'backstop: outbox.stream must be text'); END;
CREATE TRIGGER {{prefix}}outbox_check_stream_update BEFORE UPDATE OF stream ON {{prefix}}outbox
    WHEN typeof(NEW.stream) <> 'text'
BEGIN SELECT RAISE(ABORT, 'backstop: outbox.stream must be text'); END;

CREATE TRIGGER {{prefix}}outbox_check_headers_insert BEFORE INSERT ON {{prefix}}outbox
    WHEN typeof(NEW.headers) <> 'text' OR CASE WHEN json_valid(NEW.headers) THEN json_type(NEW.headers) END IS NOT 'object'
BEGIN SELECT RAISE(ABORT, 'backstop: outbox.headers must be a JSON object'); END;
CREATE TRIGGER {{prefix}}outbox_check_headers_update BEFORE UPDATE OF headers ON {{prefix}}outbox
    WHEN typeof(NEW.headers) <> 'text' OR CASE WHEN json_valid(NEW.headers) THEN json_type(NEW.headers) END IS NOT 'object'
BEGIN SELECT RAISE(ABORT, 'backstop: outbox.headers must be a JSON object'); END;

CREATE TRIGGER {{prefix}}outbox_check_status_insert BEFORE INSERT ON {{prefix}}outbox
    WHEN typeof(NEW.status) <> 'integer' OR NEW.status < 0 OR NEW.status > 65535
BEGIN SELECT RAISE(ABORT, 'backstop: outbox.status must be an integer from 0 to 65535'); END;
CREATE TRIGGER {{prefix}}outbox_check_status_update BEFORE UPDATE OF status ON {{prefix}}outbox
    WHEN typeof(NEW.status) <> 'integer' OR NEW.status < 0 OR NEW.status > 65535
BEGIN SELECT RAISE(ABORT, 'backstop: outbox.status must be an integer from 0 to 65535'); END;

CREATE TRIGGER {{prefix}}outbox_check_attempts_insert BEFORE INSERT ON {{prefix}}outbox
    WHEN typeof(NEW.attempts) <> 'integer' OR NEW.attempts < 0
BEGIN SELECT RAISE(ABORT, 'backstop: outbox.attempts must be a non-negative integer'); END;
CREATE TRIGGER {{prefix}}outbox_check_attempts_update BEFORE UPDATE OF attempts ON {{prefix}}outbox
    WHEN typeof(NEW.attempts) <> 'integer' OR NEW.attempts < 0
BEGIN SELECT RAISE(ABORT, 'backstop: outbox.attempts must be a non-negative integer'); END;

CREATE TRIGGER {{prefix}}outbox_check_failure_reason_insert BEFORE INSERT ON {{prefix}}outbox
    WHEN typeof(NEW.failure_reason) NOT IN ('integer', 'null')
BEGIN SELECT RAISE(ABORT, 'backstop: outbox.failure_reason must be an integer or NULL'); END;
CREATE TRIGGER {{prefix}}outbox_check_failure_reason_update BEFORE UPDATE OF failure_reason ON {{prefix}}outbox
    WHEN typeof(NEW.failure_reason) NOT IN ('integer', 'null')
BEGIN SELECT RAISE(ABORT, 'backstop: outbox.failure_reason must be an integer or NULL'); END;

CREATE TRIGGER {{prefix}}outbox_check_created_at_insert BEFORE INSERT ON {{prefix}}outbox
    WHEN typeof(NEW.created_at) <> 'integer' OR NEW.created_at NOT BETWEEN -62135596800000 AND 253402300799999
BEGIN SELECT RAISE(ABORT, 'backstop: outbox.created_at must be unix milliseconds'); END;
CREATE TRIGGER {{prefix}}outbox_check_created_at_update BEFORE UPDATE OF created_at ON {{prefix}}outbox
    WHEN typeof(NEW.created_at) <> 'integer' OR NEW.created_at NOT BETWEEN -62135596800000 AND 253402300799999
BEGIN SELECT RAISE(ABORT, 'backstop: outbox.created_at must be unix milliseconds'); END;

CREATE TRIGGER {{prefix}}outbox_check_scheduled_for_insert BEFORE INSERT ON {{prefix}}outbox
    WHEN typeof(NEW.scheduled_for) NOT IN ('integer', 'null') OR NEW.scheduled_for NOT BETWEEN -62135596800000 AND 253402300799999
BEGIN SELECT RAISE(ABORT, 'backstop: outbox.scheduled_for must be unix milliseconds or NULL'); END;
CREATE TRIGGER {{prefix}}outbox_check_scheduled_for_update BEFORE UPDATE OF scheduled_for ON {{prefix}}outbox
    WHEN typeof(NEW.scheduled_for) NOT IN ('integer', 'null') OR NEW.scheduled_for NOT BETWEEN -62135596800000 AND 253402300799999
BEGIN SELECT RAISE(ABORT, 'backstop: outbox.scheduled_for must be unix milliseconds or NULL'); END;

CREATE TRIGGER {{prefix}}outbox_check_lease_expiry_insert BEFORE INSERT ON {{prefix}}outbox
    WHEN typeof(NEW.lease_expiry) NOT IN ('integer', 'null') OR NEW.lease_expiry NOT BETWEEN -62135596800000 AND 253402300799999
BEGIN SELECT RAISE(ABORT, 'backstop: outbox.lease_expiry must be unix milliseconds or NULL'); END;
CREATE TRIGGER {{prefix}}outbox_check_lease_expiry_update BEFORE UPDATE OF lease_expiry ON {{prefix}}outbox
    WHEN typeof(NEW.lease_expiry) NOT IN ('integer', 'null') OR NEW.lease_expiry NOT BETWEEN -62135596800000 AND 253402300799999
BEGIN SELECT RAISE(ABORT, 'backstop: outbox.lease_expiry must be unix milliseconds or NULL'); END;

CREATE TRIGGER {{prefix}}outbox_check_dead_lettered_at_insert BEFORE INSERT ON {{prefix}}outbox
    WHEN typeof(NEW.dead_lettered_at) NOT IN ('integer', 'null') OR NEW.dead_lettered_at NOT BETWEEN -62135596800000 AND 253402300799999
BEGIN SELECT RAISE(ABORT, 'backstop: outbox.dead_lettered_at must be unix milliseconds or NULL'); END;
CREATE TRIGGER {{prefix}}outbox_check_dead_lettered_at_update BEFORE UPDATE OF dead_lettered_at ON {{prefix}}outbox
    WHEN typeof(NEW.dead_lettered_at) NOT IN ('integer', 'null') OR NEW.dead_lettered_at NOT BETWEEN -62135596800000 AND 253402300799999
BEGIN SELECT RAISE(ABORT, 'backstop: outbox.dead_lettered_at must be unix milliseconds or NULL'); END;

CREATE TRIGGER {{prefix}}outbox_check_first_failed_at_insert BEFORE INSERT ON {{prefix}}outbox
    WHEN typeof(NEW.first_failed_at) NOT IN ('integer', 'null') OR NEW.first_failed_at NOT BETWEEN -62135596800000 AND 253402300799999
BEGIN SELECT RAISE(ABORT, 'backstop: outbox.first_failed_at must be unix milliseconds or NULL'); END;
CREATE TRIGGER {{prefix}}outbox_check_first_failed_at_update BEFORE UPDATE OF first_failed_at ON {{prefix}}outbox
    WHEN typeof(NEW.first_failed_at) NOT IN ('integer', 'null') OR NEW.first_failed_at NOT BETWEEN -62135596800000 AND 253402300799999
BEGIN SELECT RAISE(ABORT, 'backstop: outbox.first_failed_at must be unix milliseconds or NULL'); END;

CREATE TRIGGER {{prefix}}outbox_check_last_failed_at_insert BEFORE INSERT ON {{prefix}}outbox
    WHEN typeof(NEW.last_failed_at) NOT IN ('integer', 'null') OR NEW.last_failed_at NOT BETWEEN -62135596800000 AND 253402300799999
BEGIN SELECT RAISE(ABORT, 'backstop: outbox.last_failed_at must be unix milliseconds or NULL'); END;
CREATE TRIGGER {{prefix}}outbox_check_last_failed_at_update BEFORE UPDATE OF last_failed_at ON {{prefix}}outbox
    WHEN typeof(NEW.last_failed_at) NOT IN ('integer', 'null') OR NEW.last_failed_at NOT BETWEEN -62135596800000 AND 253402300799999
BEGIN SELECT RAISE(ABORT, 'backstop: outbox.last_failed_at must be unix milliseconds or NULL'); END;

CREATE TRIGGER {{prefix}}outbox_check_stream_released_at_insert BEFORE INSERT ON {{prefix}}outbox
    WHEN typeof(NEW.stream_released_at) NOT IN ('integer', 'null') OR NEW.stream_released_at NOT BETWEEN -62135596800000 AND 253402300799999
BEGIN SELECT RAISE(ABORT, 'backstop: outbox.stream_released_at must be unix milliseconds or NULL'); END;
CREATE TRIGGER {{prefix}}outbox_check_stream_released_at_update BEFORE UPDATE OF stream_released_at ON {{prefix}}outbox
    WHEN typeof(NEW.stream_released_at) NOT IN ('integer', 'null') OR NEW.stream_released_at NOT BETWEEN -62135596800000 AND 253402300799999
BEGIN SELECT RAISE(ABORT, 'backstop: outbox.stream_released_at must be unix milliseconds or NULL'); END;

CREATE TRIGGER {{prefix}}outbox_check_published_at_insert BEFORE INSERT ON {{prefix}}outbox
    WHEN typeof(NEW.published_at) NOT IN ('integer', 'null') OR NEW.published_at NOT BETWEEN -62135596800000 AND 253402300799999
BEGIN SELECT RAISE(ABORT, 'backstop: outbox.published_at must be unix milliseconds or NULL'); END;
CREATE TRIGGER {{prefix}}outbox_check_published_at_update BEFORE UPDATE OF published_at ON {{prefix}}outbox
    WHEN typeof(NEW.published_at) NOT IN ('integer', 'null') OR NEW.published_at NOT BETWEEN -62135596800000 AND 253402300799999
BEGIN SELECT RAISE(ABORT, 'backstop: outbox.published_at must be unix milliseconds or NULL'); END;

-- Rows the store cannot decode (the triggers' rules, on the stored values):
-- store/sqlite/quarantine.go finds them here, so that a row never claimed
-- (a text scheduled_for compares after every number) cannot stall its
-- stream unseen. Empty unless old rows break the rules.
CREATE INDEX {{prefix}}outbox_undecodable ON {{prefix}}outbox (seq)
    WHERE (typeof(destination) <> 'text' OR destination = '') OR (typeof(type) <> 'text' OR type = '') OR (typeof(stream) <> 'text') OR (typeof(headers) <> 'text' OR CASE WHEN json_valid(headers) THEN json_type(headers) END IS NOT 'object') OR (typeof(status) <> 'integer' OR status < 0 OR status > 65535) OR (typeof(attempts) <> 'integer' OR attempts < 0) OR (typeof(failure_reason) NOT IN ('integer', 'null')) OR (typeof(created_at) <> 'integer' OR created_at NOT BETWEEN -62135596800000 AND 253402300799999) OR (typeof(scheduled_for) NOT IN ('integer', 'null') OR scheduled_for NOT BETWEEN -62135596800000 AND 253402300799999) OR (typeof(lease_expiry) NOT IN ('integer', 'null') OR lease_expiry NOT BETWEEN -62135596800000 AND 253402300799999) OR (typeof(dead_lettered_at) NOT IN ('integer', 'null') OR dead_lettered_at NOT BETWEEN -62135596800000 AND 253402300799999) OR (typeof(first_failed_at) NOT IN ('integer', 'null') OR first_failed_at NOT BETWEEN -62135596800000 AND 253402300799999) OR (typeof(last_failed_at) NOT IN ('integer', 'null') OR last_failed_at NOT BETWEEN -62135596800000 AND 253402300799999) OR (typeof(stream_released_at) NOT IN ('integer', 'null') OR stream_released_at NOT BETWEEN -62135596800000 AND 253402300799999) OR (typeof(published_at) NOT IN ('integer', 'null') OR published_at NOT BETWEEN -62135596800000 AND 253402300799999);
