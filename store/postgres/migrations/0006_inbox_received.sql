-- The inbox's de-duplication records (package inbox). A received message is
-- an outbox row for the destination 'inbox:<name>'; this table remembers
-- the source message ids each inbox has received, written in the same
-- transaction as the row, so that a message the source delivers again is
-- recognised and dropped. Records are swept once older than the inbox's
-- window, in bounded batches.
CREATE TABLE {{T}}inbox_received (
	inbox       text        NOT NULL,
	message_id  text        NOT NULL,
	received_at timestamptz NOT NULL DEFAULT now(),
	CONSTRAINT {{P}}inbox_received_pkey PRIMARY KEY (inbox, message_id)
);

-- Sweep (inbox.go): the oldest records of one inbox first.
CREATE INDEX {{P}}inbox_received_at_idx ON {{T}}inbox_received (inbox, received_at);
