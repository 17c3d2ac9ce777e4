-- Backstop's PostgreSQL schema, version 22 ({{T}} and {{P}} as in 0001):
-- an update wakes its stream also when the row keeps an instance but a
-- column the claim reads to decide whether the row holds its stream
-- changed. The row trigger of 0013 fired only for a row left without a
-- lease (instance_id IS NULL), on the ground that a leased row holds its
-- stream whatever else changes. A lapsed lease does not: a message an
-- operator dead-letters (DeadLetter) while a relay delivers it keeps the
-- relay's lease, and when that lease lapses the row keeps its instance and
-- an expiry in the past. A claim then reads the stream, finds the strict
-- dead letter holding it and leaves the stream waiting with no time to
-- wake at (only a write can free it). ReleaseStream was that write, but
-- it sets only stream_released_at on a row that still has an instance, so
-- the trigger did not fire, the stream was never read again, and its
-- later messages were never claimed (conformance case
-- DLQLifecycle/HandDeadLetteredInFlightLeaseLapsedFreedByOperator).
-- Plain SQL that clears dead_lettered_at or moves scheduled_for on such a
-- row had the same gap.
--
-- The condition stays off the hot path: a claim's lease sets only
-- instance_id and lease_expiry and a renewal only lease_expiry, which are
-- not in it; every completion, failure and release clears instance_id and
-- fired before. What it adds fires on operators' changes (release, a hand
-- dead-letter of a leased row) and costs at most a read of a stream head
-- that is still leased.
DROP TRIGGER {{P}}outbox_wake_update ON {{T}}outbox;

CREATE TRIGGER {{P}}outbox_wake_update AFTER UPDATE ON {{T}}outbox
	FOR EACH ROW WHEN (NEW.stream <> '' AND (NEW.instance_id IS NULL
		OR NEW.stream_released_at IS DISTINCT FROM OLD.stream_released_at
		OR NEW.dead_lettered_at IS DISTINCT FROM OLD.dead_lettered_at
		OR NEW.scheduled_for IS DISTINCT FROM OLD.scheduled_for
		OR NEW.published_at IS DISTINCT FROM OLD.published_at
		OR NEW.ordering IS DISTINCT FROM OLD.ordering))
	EXECUTE FUNCTION {{T}}stream_wake_row();
