-- A message that enters a stream below its head_seq lowers it. head_seq
-- says every message of the stream below it is delivered, and a claim
-- reads the stream from there (0004; streamread.go). A row can enter a
-- stream below it: plain SQL that moves a message to another destination
-- or stream (an operator re-routing a retired destination's messages into
-- one that already has the stream), that turns its ordering from none to
-- an ordered one, or that inserts it with an explicit seq; a replay that
-- takes a delivered row's Published flag off. The claim never read it:
-- it delivered the later messages of the stream past it, deleted the
-- streams row once they were done, and the message stayed in the outbox
-- undelivered for good (TestRowMovedIntoAStreamBelowItsHeadIsClaimed).
--
-- Both triggers cost one primary-key probe of the streams row, which
-- changes nothing unless the row's seq is below the head. Making the
-- stream ready is left to the triggers of 0004 and 0015.
CREATE TRIGGER {{prefix}}outbox_stream_head_insert AFTER INSERT ON {{prefix}}outbox
WHEN NEW.stream <> '' AND coalesce(NEW.ordering, '') <> 'none' AND (NEW.status & 4) = 0
BEGIN
    UPDATE {{prefix}}streams SET head_seq = NEW.seq
    WHERE destination = NEW.destination AND stream = NEW.stream AND head_seq > NEW.seq;
END;

CREATE TRIGGER {{prefix}}outbox_stream_head_update AFTER UPDATE OF destination, stream, ordering, status, seq ON {{prefix}}outbox
WHEN NEW.stream <> '' AND coalesce(NEW.ordering, '') <> 'none' AND (NEW.status & 4) = 0
BEGIN
    UPDATE {{prefix}}streams SET head_seq = NEW.seq
    WHERE destination = NEW.destination AND stream = NEW.stream AND head_seq > NEW.seq;
END;
