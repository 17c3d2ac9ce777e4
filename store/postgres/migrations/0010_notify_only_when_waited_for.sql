-- Backstop's PostgreSQL schema, version 10 ({{T}} and {{P}} as in 0001): an
-- insert sends its NOTIFY only while some listener waits for one. A
-- transaction that has sent a NOTIFY takes a database-wide lock as it
-- commits and holds it through the commit's flush, so committing writers
-- that notify wait for each other: four writers of one-row transactions
-- managed 380-410 commits a second with the notification and 910-1,190
-- without it, against 1,370-1,630 for the same INSERT into a plain table.
-- A relay that is busy claiming needs no wake-up, so it registers in
-- {{T}}waiters only when it is about to wait on its LISTEN connection and
-- leaves as soon as it is woken (store.WakeGate); a Listen caller stays
-- registered while it listens. With nobody registered an insert notifies
-- nobody and commits like any other write.
CREATE UNLOGGED TABLE {{T}}waiters (
	id    text PRIMARY KEY,
	since timestamptz NOT NULL DEFAULT now()
);

CREATE OR REPLACE FUNCTION {{T}}outbox_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	IF EXISTS (SELECT 1 FROM {{T}}waiters) THEN
		PERFORM pg_notify('{{P}}outbox', d.destination)
		FROM (SELECT DISTINCT destination FROM new_rows) AS d;
	END IF;
	RETURN NULL;
END
$$;
