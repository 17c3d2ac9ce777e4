-- Backstop's PostgreSQL schema, version 8 ({{T}} and {{P}} as in 0001): the
-- claim never plans a sequential scan. Its statements read through indexes
-- by design (docs/claim.md), but before a table has statistics (a new or
-- fast-growing outbox, autovacuum off or behind) the planner may choose to
-- lease the chosen rows, `seq = ANY(<a literal array of 256>)`, with a scan
-- of the whole outbox: measured at 50 000 pending rows in 10 000 streams, a
-- claim of 256 took 60-135 ms on a fresh connection instead of 20-35 ms,
-- and grew with the table. Off inside the function only; every statement
-- it runs has an index to use.
ALTER FUNCTION {{T}}claim(timestamptz, text, int, bigint, text[], text[], text[], text[], text, text[], int[])
	SET enable_seqscan = off;
