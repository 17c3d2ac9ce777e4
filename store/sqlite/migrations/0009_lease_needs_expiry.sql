-- A lease is an instance and an expiry: the outbox refuses instance_id
-- without lease_expiry. Such a row, written by plain SQL (an application
-- copying rows, a restore), was never claimed, swept or listed as ready
-- unless it was the head of an ordered stream: the unordered claim takes a
-- row that has no instance or whose lease has lapsed, and a NULL expiry
-- never lapses. Backstop itself always writes both or neither.
--
-- Rows already in that state are treated as holding a lease that has
-- lapsed: their expiry becomes now, so the next claim takes them, and
-- the instance they name is kept for the operator to see.

UPDATE {{prefix}}outbox SET lease_expiry = CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)
WHERE instance_id IS NOT NULL AND lease_expiry IS NULL;

CREATE TRIGGER {{prefix}}outbox_check_lease_insert BEFORE INSERT ON {{prefix}}outbox
    WHEN NEW.instance_id IS NOT NULL AND NEW.lease_expiry IS NULL
BEGIN SELECT RAISE(ABORT, 'backstop: outbox.lease_expiry must be set when instance_id is'); END;
CREATE TRIGGER {{prefix}}outbox_check_lease_update BEFORE UPDATE OF instance_id, lease_expiry ON {{prefix}}outbox
    WHEN NEW.instance_id IS NOT NULL AND NEW.lease_expiry IS NULL
BEGIN SELECT RAISE(ABORT, 'backstop: outbox.lease_expiry must be set when instance_id is'); END;
