-- Backstop's PostgreSQL schema, version 1.
--
-- {{T}} is the qualified table prefix (such as backstop_ or "app".backstop_),
-- {{P}} the bare prefix used for index, trigger and channel names. The
-- migration runner substitutes both and runs this file in one transaction.

-- {{T}}uuidv7 returns a version 7 UUID: 48 bits of Unix milliseconds from
-- clock_timestamp(), then random bits from gen_random_uuid() with the
-- version nibble set to 7 (the variant bits of a v4 UUID are already those
-- of RFC 9562). PostgreSQL 15 has no uuidv7() of its own.
CREATE FUNCTION {{T}}uuidv7() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
	SELECT encode(
		set_bit(set_bit(
			overlay(uuid_send(gen_random_uuid())
				PLACING substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
				FROM 1 FOR 6),
			52, 1), 53, 1),
		'hex')::uuid
$$;

-- The outbox. seq is the stream order: messages of one (destination,
-- stream) pair are delivered by seq, never by time. Everything but
-- destination and type has a default, so that an application in any
-- language can write
--   INSERT INTO {{T}}outbox (destination, type, payload) VALUES (...)
CREATE TABLE {{T}}outbox (
	seq                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	id                 uuid NOT NULL DEFAULT {{T}}uuidv7(),
	destination        text NOT NULL,
	stream             text NOT NULL DEFAULT '',
	type               text NOT NULL,
	payload            bytea NOT NULL DEFAULT '',
	headers            jsonb NOT NULL DEFAULT '{}',
	ordering           text NULL CHECK (ordering IN ('strict', 'release', 'none')),
	status             integer NOT NULL DEFAULT 1,
	attempts           integer NOT NULL DEFAULT 0,
	failure_reason     integer,
	error              text,
	fingerprint        text,
	scheduled_for      timestamptz,
	instance_id        text,
	lease_expiry       timestamptz,
	created_at         timestamptz NOT NULL DEFAULT now(),
	first_failed_at    timestamptz,
	last_failed_at     timestamptz,
	dead_lettered_at   timestamptz,
	stream_released_at timestamptz,
	published_at       timestamptz,
	CONSTRAINT {{P}}outbox_id_key UNIQUE (id)
);

-- Claim, fresh branch: undelivered, unleased, never scheduled messages in
-- seq order (claim.go, freshSQL).
CREATE INDEX {{P}}outbox_fresh_idx ON {{T}}outbox (seq)
	WHERE published_at IS NULL AND dead_lettered_at IS NULL
	AND instance_id IS NULL AND scheduled_for IS NULL;

-- Claim, due branch: unleased messages waiting for a later try, by due
-- time, so that a large backlog of future retries is never scanned
-- (claim.go, dueSQL; also ScheduledBacklog).
CREATE INDEX {{P}}outbox_due_idx ON {{T}}outbox (scheduled_for, seq)
	WHERE published_at IS NULL AND dead_lettered_at IS NULL
	AND instance_id IS NULL AND scheduled_for IS NOT NULL;

-- Claim, expired branch, and releasing the leases of dead instances: only
-- leased rows (the messages in flight) are in it.
CREATE INDEX {{P}}outbox_lease_idx ON {{T}}outbox (lease_expiry)
	WHERE instance_id IS NOT NULL;

-- Stream order: the NOT EXISTS probe for an earlier message of the same
-- stream, ReleaseStream and StreamStatus.
CREATE INDEX {{P}}outbox_stream_idx ON {{T}}outbox (destination, stream, seq)
	WHERE published_at IS NULL AND stream <> '';

-- Monitoring: failed messages (RetryDistribution, FailureReasons,
-- PoisonCandidates) are few; this keeps those queries off the backlog.
CREATE INDEX {{P}}outbox_failed_idx ON {{T}}outbox (attempts)
	WHERE published_at IS NULL AND status & 32768 <> 0;

-- Sweep: published messages kept for the retention period.
CREATE INDEX {{P}}outbox_published_idx ON {{T}}outbox (published_at)
	WHERE published_at IS NOT NULL;

-- {{T}}outbox_notify tells LISTENers on channel {{P}}outbox which
-- destinations have new messages, once per statement and destination.
CREATE FUNCTION {{T}}outbox_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_notify('{{P}}outbox', d.destination)
	FROM (SELECT DISTINCT destination FROM new_rows) AS d;
	RETURN NULL;
END
$$;

CREATE TRIGGER {{P}}outbox_notify
	AFTER INSERT ON {{T}}outbox
	REFERENCING NEW TABLE AS new_rows
	FOR EACH STATEMENT EXECUTE FUNCTION {{T}}outbox_notify();

-- Relay instances and their heartbeats.
CREATE TABLE {{T}}instances (
	id             text PRIMARY KEY,
	host           text NOT NULL DEFAULT '',
	pid            integer NOT NULL DEFAULT 0,
	started_at     timestamptz,
	last_heartbeat timestamptz NOT NULL
);

-- The dead-letter queue.
CREATE TABLE {{T}}dead_letters (
	id                 text PRIMARY KEY,
	task_instance_id   text NOT NULL DEFAULT '',
	task_id            text NOT NULL DEFAULT '',
	dag_run_id         text NOT NULL DEFAULT '',
	dag_id             text NOT NULL DEFAULT '',
	message_id         text NOT NULL DEFAULT '',
	destination        text NOT NULL DEFAULT '',
	stream             text NOT NULL DEFAULT '',
	type               text NOT NULL DEFAULT '',
	payload            bytea,
	headers            jsonb NOT NULL DEFAULT '{}',
	seq                bigint NOT NULL DEFAULT 0,
	failure_reason     text NOT NULL DEFAULT '',
	reason             integer NOT NULL DEFAULT 99,
	failure_time       timestamptz NOT NULL,
	first_failure_time timestamptz,
	attempts           integer NOT NULL DEFAULT 0,
	last_attempt_time  timestamptz,
	error_message      text NOT NULL DEFAULT '',
	fingerprint        text NOT NULL DEFAULT '',
	metadata           jsonb NOT NULL DEFAULT '{}',
	status             text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'resolved')),
	resolution_notes   text NOT NULL DEFAULT '',
	resolved_at        timestamptz,
	replayed           boolean NOT NULL DEFAULT false,
	replayed_at        timestamptz
);

-- List order and cursor pagination: (failure_time, id).
CREATE INDEX {{P}}dead_letters_time_idx ON {{T}}dead_letters (failure_time, id);

-- Finding a message's entries (replay, hand dead-lettering).
CREATE INDEX {{P}}dead_letters_message_idx ON {{T}}dead_letters (message_id)
	WHERE message_id <> '';
