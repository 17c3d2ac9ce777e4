-- Backstop's PostgreSQL schema, version 16 ({{T}} and {{P}} as in 0001): a
-- lease is an instance and an expiry, and the outbox refuses instance_id
-- without lease_expiry. Such a row, written by plain SQL (an application
-- copying rows, a restore), was never claimed, swept or listed as ready
-- unless it was the head of an ordered stream: the unordered claim takes a
-- row that has no instance or whose lease has lapsed, and a NULL expiry
-- never lapses. Backstop itself always writes both or neither.
--
-- The constraint is added NOT VALID, like those of 0002, and first, so
-- that its lock keeps writers out until the rows already in that state
-- are mended: they are treated as holding a lease that has lapsed (their
-- expiry becomes now, so the next claim takes them; the instance they
-- name is kept for the operator to see). outbox_lease_idx finds them.
ALTER TABLE {{T}}outbox ADD CONSTRAINT {{P}}outbox_lease_has_expiry
	CHECK (instance_id IS NULL OR lease_expiry IS NOT NULL) NOT VALID;

UPDATE {{T}}outbox SET lease_expiry = now()
WHERE instance_id IS NOT NULL AND lease_expiry IS NULL;
