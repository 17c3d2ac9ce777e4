-- Where an inbox's receiver is in a source that keeps its messages and
-- leaves the consumer to say where it starts (a RabbitMQ stream queue):
-- the position after the last message the receiver handled. A receiver
-- started again resumes there, instead of reading the last
-- de-duplication window of the source again (every message a
-- de-duplication check) and losing what was published before that window
-- when it was stopped for longer. updated_at is unix milliseconds.
CREATE TABLE {{prefix}}inbox_cursors (
    inbox      TEXT    NOT NULL,
    source     TEXT    NOT NULL,
    next       INTEGER NOT NULL CHECK (next >= 0),
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (inbox, source)
);
