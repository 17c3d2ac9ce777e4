-- The outbox is a documented contract: any application may write to it with
-- plain SQL, naming only destination, type and payload, such as
--   INSERT INTO backstop_outbox (destination, type, payload) VALUES ('billing', 'order.created', '{"id":1}');
-- and every other column takes its default (a random UUID id, status Stored,
-- created now). seq is the stream order; times are unix milliseconds.
CREATE TABLE {{prefix}}outbox (
    seq                INTEGER PRIMARY KEY AUTOINCREMENT,
    id                 TEXT    NOT NULL UNIQUE DEFAULT (
        lower(hex(randomblob(4))) || '-' || lower(hex(randomblob(2))) || '-4' ||
        substr(lower(hex(randomblob(2))), 2) || '-' ||
        substr('89ab', 1 + (abs(random()) % 4), 1) || substr(lower(hex(randomblob(2))), 2) || '-' ||
        lower(hex(randomblob(6))))
        -- a UUID in its 36-character form, so every row can be read back
        CHECK (length(id) = 36 AND length(replace(id, '-', '')) = 32 AND NOT id GLOB '*[^0-9a-fA-F-]*'
               AND substr(id, 9, 1) = '-' AND substr(id, 14, 1) = '-' AND substr(id, 19, 1) = '-' AND substr(id, 24, 1) = '-'),
    destination        TEXT    NOT NULL,
    stream             TEXT    NOT NULL DEFAULT '',
    type               TEXT    NOT NULL,
    payload            BLOB,
    headers            TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(headers)),
    ordering           TEXT    CHECK (ordering IS NULL OR ordering IN ('', 'strict', 'release', 'none')),
    status             INTEGER NOT NULL DEFAULT 1,
    attempts           INTEGER NOT NULL DEFAULT 0,
    failure_reason     INTEGER,
    error              TEXT,
    fingerprint        TEXT,
    scheduled_for      INTEGER,
    instance_id        TEXT,
    lease_expiry       INTEGER,
    created_at         INTEGER NOT NULL DEFAULT (CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)),
    first_failed_at    INTEGER,
    last_failed_at     INTEGER,
    dead_lettered_at   INTEGER,
    stream_released_at INTEGER,
    published_at       INTEGER
);

-- Claim candidates (claim.go): undelivered, live rows scanned in seq order;
-- the due and lease tests are answered from the index.
CREATE INDEX {{prefix}}outbox_claim ON {{prefix}}outbox (seq, destination, scheduled_for, lease_expiry)
    WHERE dead_lettered_at IS NULL AND (status & 4) = 0;

-- Stream check (claim.go, StreamStatus, ReleaseStream): the earlier
-- undelivered messages of one (destination, stream); published messages kept
-- for retention stay out of it.
CREATE INDEX {{prefix}}outbox_stream ON {{prefix}}outbox (destination, stream, seq)
    WHERE (status & 4) = 0;

-- Scheduled-retry backlog (monitor.go).
CREATE INDEX {{prefix}}outbox_scheduled ON {{prefix}}outbox (scheduled_for)
    WHERE scheduled_for IS NOT NULL;

-- Leases of an instance declared dead (batch.go).
CREATE INDEX {{prefix}}outbox_instance ON {{prefix}}outbox (instance_id)
    WHERE instance_id IS NOT NULL;

-- Retention sweep (ops.go).
CREATE INDEX {{prefix}}outbox_published ON {{prefix}}outbox (published_at)
    WHERE published_at IS NOT NULL;

-- Retry distribution, failure reasons, poison candidates (monitor.go).
CREATE INDEX {{prefix}}outbox_failed ON {{prefix}}outbox (attempts)
    WHERE (status & 32768) <> 0;

-- Relay instances and their heartbeats (batch.go).
CREATE TABLE {{prefix}}instances (
    id             TEXT    PRIMARY KEY,
    host           TEXT    NOT NULL DEFAULT '',
    pid            INTEGER NOT NULL DEFAULT 0,
    started_at     INTEGER,
    last_heartbeat INTEGER NOT NULL
);

-- Silent instances (batch.go).
CREATE INDEX {{prefix}}instances_heartbeat ON {{prefix}}instances (last_heartbeat);
