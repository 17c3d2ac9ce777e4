-- The dead-letter list's filters by stream, by reason and by fingerprint
-- have indexes in the list's order (failure_time, id), as the plain list
-- has. Without them a bulk replay by stream or reason read every entry of
-- the queue to find a page of 500, inside the write transaction: at
-- 200,000 entries each page held the database's one writer for up to
-- seconds, and the relays' and the application's writes waited. Entries
-- are written only when messages fail for good.
CREATE INDEX {{prefix}}dead_letters_stream ON {{prefix}}dead_letters (destination, stream, failure_time, id);
CREATE INDEX {{prefix}}dead_letters_reason ON {{prefix}}dead_letters (reason, failure_time, id);
CREATE INDEX {{prefix}}dead_letters_fingerprint ON {{prefix}}dead_letters (fingerprint, failure_time, id);
