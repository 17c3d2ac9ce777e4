-- An update wakes its stream also when the row keeps an instance but a
-- column the claim reads to decide whether the row holds its stream
-- changed. The trigger of 0004 fired only for a row left without a lease
-- (instance_id IS NULL), on the ground that a leased row holds its stream
-- whatever else changes. A lapsed lease does not: a message an operator
-- dead-letters (DeadLetter) while a relay delivers it keeps the relay's
-- lease, and when that lease lapses the row keeps its instance and an
-- expiry in the past. A claim then reads the stream, finds the strict
-- dead letter holding it and leaves the stream waiting with no time to
-- wake at (only a write can free it). ReleaseStream was that write, but
-- it sets only stream_released_at on a row that still has an instance, so
-- the trigger did not fire, the stream was never read again, and its
-- later messages were never claimed (conformance case
-- DLQLifecycle/HandDeadLetteredInFlightLeaseLapsedFreedByOperator). Plain
-- SQL that clears dead_lettered_at or moves scheduled_for on such a row
-- had the same gap.
--
-- The condition stays off the hot path: a claim's lease sets only
-- instance_id and lease_expiry and a renewal only lease_expiry, which are
-- not in it; every completion, failure and release clears instance_id and
-- fired before. What it adds fires on operators' changes (release, a hand
-- dead-letter of a leased row) and costs at most a read of a stream head
-- that is still leased.
--
-- Version 15, not 14: 14 was taken by a change made at the same time.
-- Versions are applied by number whatever was applied before, so either
-- may land first.
DROP TRIGGER {{prefix}}outbox_stream_update;

CREATE TRIGGER {{prefix}}outbox_stream_update AFTER UPDATE ON {{prefix}}outbox
WHEN NEW.stream <> '' AND (NEW.instance_id IS NULL
    OR NEW.stream_released_at IS NOT OLD.stream_released_at
    OR NEW.dead_lettered_at IS NOT OLD.dead_lettered_at
    OR NEW.scheduled_for IS NOT OLD.scheduled_for
    OR NEW.status IS NOT OLD.status
    OR NEW.published_at IS NOT OLD.published_at
    OR NEW.ordering IS NOT OLD.ordering)
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
