-- A claim no longer takes the leases that live relays hold when the
-- clock steps forward (the host's: SQLite's clock is the process's).
-- Stepped forward by more than what is left of the leases, that clock
-- made every lease look lapsed at once, and another process on the same
-- database file took them while the one that held them was delivering
-- them: each in-flight message was sent twice.
--
-- Each store keeps its last reading of the clock with the process's
-- monotonic clock. A batch that renews or claims and finds the clock
-- further ahead than store.StepThreshold (a second, or half its lease if
-- less) past what it expected records the step here (one recorded within
-- the last lease has its hold lengthened to a lease on instead): until
-- held_until, when the last lease granted before the step ends as it
-- would have without it (at most an hour), no lease lapses, whoever
-- claims, and a stream whose head is leased waits for the hold's end,
-- while the holders renew theirs on the stepped clock
-- (TestConformance/LeaseTime). The check for dead instances and the sweeps
-- of the inbox's de-duplication records and of idempotency keys end their
-- windows the steps recorded within them later: a heartbeat or a record
-- from before a step looked that much older. Times are Unix milliseconds,
-- as in the outbox.
CREATE TABLE IF NOT EXISTS {{prefix}}clock_steps (
	noticed_at INTEGER PRIMARY KEY,
	ahead      INTEGER NOT NULL CHECK (ahead > 0),
	held_until INTEGER NOT NULL
);
