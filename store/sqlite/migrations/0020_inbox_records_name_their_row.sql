-- An inbox's de-duplication record names the outbox row it stands for
-- (its id), and is not swept while that row is still there: the sweep
-- deleted a record once it was older than the inbox's window, whether or
-- not the message had been handled, and a message still waiting (retried,
-- behind a blocked strict stream, or dead-lettered) that its source
-- delivered again was stored a second time and handled twice
-- (TestSweepKeepsTheRecordOfAPendingMessage). Records written before this
-- version name no row and are swept as before.
ALTER TABLE {{prefix}}inbox_received ADD COLUMN row_id TEXT;
