-- A list of the messages waiting for a retry, or of the dead-lettered ones
-- (GET /v1/messages?state=, the dashboard's messages page, backstop
-- messages list --state), reads those messages in seq order: it walked
-- outbox_claim (every live message) or the table itself until it had a
-- page, reading each row (TestListByStateReadsOnlyThatState). Fresh
-- messages enter neither index: a message is in the first from its first
-- failure until it is delivered or dead-lettered, and in the second while
-- it is dead-lettered.
CREATE INDEX {{prefix}}outbox_retrying ON {{prefix}}outbox (seq)
    WHERE (status & 4) = 0 AND dead_lettered_at IS NULL AND (status & 32768) <> 0;

CREATE INDEX {{prefix}}outbox_dead_seq ON {{prefix}}outbox (seq)
    WHERE dead_lettered_at IS NOT NULL;
