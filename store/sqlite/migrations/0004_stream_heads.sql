-- The claim walks stream heads, never the rows waiting behind them
-- (docs/claim.md; heads.go). One row per ordered (destination, stream) with
-- undelivered messages:
--   ready:      a claim should look at the stream; ready streams are served
--               by turn, oldest first (round-robin, not by depth);
--   wait_until: when not ready, the earliest time (unix ms) the stream may
--               hold a claimable message with nothing written (a lease that
--               expires, a retry that comes due); NULL when only a write can
--               free it;
--   head_seq:   every message of the stream below it is delivered.
-- SQLite runs one writer at a time, so seq is commit order already.
CREATE TABLE {{prefix}}streams (
    destination TEXT    NOT NULL,
    stream      TEXT    NOT NULL,
    ready       INTEGER NOT NULL DEFAULT 1,
    turn        INTEGER NOT NULL DEFAULT 0,
    wait_until  INTEGER,
    head_seq    INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (destination, stream)
) WITHOUT ROWID;

-- Ready streams of a destination, by turn.
CREATE INDEX {{prefix}}streams_ready ON {{prefix}}streams (destination, turn) WHERE ready = 1;

-- Streams that become claimable by time alone.
CREATE INDEX {{prefix}}streams_wait ON {{prefix}}streams (wait_until)
    WHERE ready = 0 AND wait_until IS NOT NULL;

-- The turn counter: each stream that becomes ready takes the next turn.
CREATE TABLE {{prefix}}stream_turn (n INTEGER NOT NULL);
INSERT INTO {{prefix}}stream_turn (n) VALUES (0);

-- Backfill: every stream with undelivered messages starts ready.
INSERT INTO {{prefix}}streams (destination, stream, head_seq)
SELECT destination, stream, min(seq) FROM {{prefix}}outbox
WHERE (status & 4) = 0 AND stream <> '' AND coalesce(ordering, '') <> 'none'
GROUP BY destination, stream;

-- Unordered messages (no stream, or ordering none) claim through their own
-- index, by destination and seq; lapsed leases by lease_expiry.
CREATE INDEX {{prefix}}outbox_unordered ON {{prefix}}outbox (destination, seq)
    WHERE dead_lettered_at IS NULL AND (status & 4) = 0
      AND instance_id IS NULL AND scheduled_for IS NULL
      AND (stream = '' OR ordering = 'none');
CREATE INDEX {{prefix}}outbox_lease ON {{prefix}}outbox (lease_expiry)
    WHERE instance_id IS NOT NULL;

-- A new ordered message makes its stream ready (creating its row).
CREATE TRIGGER {{prefix}}outbox_stream_insert AFTER INSERT ON {{prefix}}outbox
WHEN NEW.stream <> '' AND coalesce(NEW.ordering, '') <> 'none'
BEGIN
    UPDATE {{prefix}}stream_turn SET n = n + 1;
    INSERT INTO {{prefix}}streams (destination, stream, ready, turn)
    VALUES (NEW.destination, NEW.stream, 1, (SELECT n FROM {{prefix}}stream_turn))
    ON CONFLICT (destination, stream) DO UPDATE SET ready = 1, wait_until = NULL, turn = excluded.turn
        WHERE ready = 0;
END;

-- A change that may free later messages (a lease cleared: delivered,
-- failed, released, dead-lettered; a retry made due; a stream released;
-- a replay) makes the stream ready; so does a deletion.
CREATE TRIGGER {{prefix}}outbox_stream_update AFTER UPDATE ON {{prefix}}outbox
WHEN NEW.stream <> '' AND NEW.instance_id IS NULL
BEGIN
    UPDATE {{prefix}}stream_turn SET n = n + 1;
    INSERT INTO {{prefix}}streams (destination, stream, ready, turn)
    SELECT NEW.destination, NEW.stream, 1, (SELECT n FROM {{prefix}}stream_turn)
    WHERE (NEW.status & 4) = 0 AND coalesce(NEW.ordering, '') <> 'none'
    ON CONFLICT (destination, stream) DO UPDATE SET ready = 1, wait_until = NULL, turn = excluded.turn
        WHERE ready = 0;
    UPDATE {{prefix}}streams SET ready = 1, wait_until = NULL, turn = (SELECT n FROM {{prefix}}stream_turn)
    WHERE destination = NEW.destination AND stream = NEW.stream AND ready = 0;
END;

CREATE TRIGGER {{prefix}}outbox_stream_delete AFTER DELETE ON {{prefix}}outbox
WHEN OLD.stream <> ''
BEGIN
    UPDATE {{prefix}}stream_turn SET n = n + 1;
    UPDATE {{prefix}}streams SET ready = 1, wait_until = NULL, turn = (SELECT n FROM {{prefix}}stream_turn)
    WHERE destination = OLD.destination AND stream = OLD.stream AND ready = 0;
END;
