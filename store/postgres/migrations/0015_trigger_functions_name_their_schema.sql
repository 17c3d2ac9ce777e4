-- Backstop's PostgreSQL schema, version 15 ({{T}} and {{P}} as in 0001;
-- {{T}} now always carries the schema the migration runs in): the functions
-- behind the outbox's triggers name their tables with their schema. A store
-- reached through its connection's search_path had its functions name
-- them bare, so an application that wrote to the outbox as
-- "app".backstop_outbox from a session whose search_path does not include
-- "app" (another service, another language, psql) had its INSERT fail with
-- "relation backstop_streams does not exist" from the ordering trigger, or
-- backstop_waiters from the notify trigger. 0014 re-created the two wake
-- functions; this re-creates the other two, with the bodies of 0003 and
-- 0010.
CREATE OR REPLACE FUNCTION {{T}}outbox_order() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.stream = '' OR NEW.ordering = 'none' THEN
		RETURN NEW;
	END IF;
	INSERT INTO {{T}}streams AS s (destination, stream) VALUES (NEW.destination, NEW.stream)
	ON CONFLICT (destination, stream) DO UPDATE
		SET ready = true, wait_until = NULL, turn = nextval('{{T}}streams_turn')
		WHERE NOT s.ready;
	NEW.seq := nextval('{{T}}outbox_seq_seq');
	RETURN NEW;
END
$$;

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
