-- The admin API's tables (admin.go).

-- Idempotency keys of enqueued messages: a key is used once; the ids it
-- wrote are returned to a repeated request. Kept apart from the outbox,
-- whose rows are deleted on delivery.
CREATE TABLE {{T}}idempotency_keys (
	key         text PRIMARY KEY,
	message_ids uuid[] NOT NULL,
	created_at  timestamptz NOT NULL DEFAULT now()
);

-- Operators' actions, newest first by id.
CREATE TABLE {{T}}audit (
	id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	at     timestamptz NOT NULL DEFAULT now(),
	actor  text NOT NULL,
	action text NOT NULL,
	target text NOT NULL DEFAULT '',
	filter text NOT NULL DEFAULT '',
	count  bigint NOT NULL DEFAULT 0,
	notes  text NOT NULL DEFAULT ''
);

CREATE INDEX {{P}}audit_target_idx ON {{T}}audit (target, id) WHERE target <> '';
