-- Where an inbox's receiver is in a source that keeps its messages and
-- leaves the consumer to say where it starts (a RabbitMQ stream queue):
-- the position after the last message the receiver handled. A receiver
-- started again resumes there, instead of reading the last
-- de-duplication window of the source again (every message a
-- de-duplication check) and losing what was published before that window
-- when it was stopped for longer.
CREATE TABLE {{T}}inbox_cursors (
	inbox      text        NOT NULL,
	source     text        NOT NULL,
	next       bigint      NOT NULL CHECK (next >= 0),
	updated_at timestamptz NOT NULL DEFAULT now(),
	CONSTRAINT {{P}}inbox_cursors_pkey PRIMARY KEY (inbox, source)
);
