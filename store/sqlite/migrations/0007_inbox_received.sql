-- The inbox's de-duplication records (package inbox). A received message is
-- an outbox row for the destination 'inbox:<name>'; this table remembers
-- the source message ids each inbox has received, written in the same
-- transaction as the row, so that a message the source delivers again is
-- recognised and dropped. Records are swept once older than the inbox's
-- window (received_at, unix milliseconds), in bounded batches.
CREATE TABLE {{prefix}}inbox_received (
    inbox       TEXT    NOT NULL,
    message_id  TEXT    NOT NULL,
    received_at INTEGER NOT NULL,
    PRIMARY KEY (inbox, message_id)
);

-- Sweep (inbox.go): the oldest records of one inbox first.
CREATE INDEX {{prefix}}inbox_received_at ON {{prefix}}inbox_received (inbox, received_at);
