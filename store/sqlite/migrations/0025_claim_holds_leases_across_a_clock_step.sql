-- A claim no longer takes the leases that live relays hold when the
-- clock steps forward (the host's: SQLite's clock is the process's).
-- Stepped forward by more than what is left of the leases, that clock
-- made every lease look lapsed at once, and another process on the same
-- database file took them while the one that held them was delivering
-- them: each in-flight message was sent twice.
--
-- Each store keeps its last reading of the clock with the process's
-- monotonic clock. A claim that finds the clock further ahead than half a
-- lease past what it expected records a hold here: for one lease from
-- then no lease lapses, whoever claims, and a stream whose head is leased
-- waits for the hold's end, while the holders renew theirs on the stepped
-- clock (TestConformance/LeaseTime/NoLeaseLapsesForALeaseAfterTheClockStepsForward).
CREATE TABLE IF NOT EXISTS {{prefix}}lease_hold (
	one        INTEGER PRIMARY KEY CHECK (one = 1),
	held_until INTEGER NOT NULL,
	ahead      INTEGER NOT NULL,
	noticed_at INTEGER NOT NULL
);
