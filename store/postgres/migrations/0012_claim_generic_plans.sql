-- Backstop's PostgreSQL schema, version 12 ({{T}} and {{P}} as in 0001):
-- the claim's statements run on generic plans. PL/pgSQL caches a plan per
-- statement, but with the plan cache's default mode a statement that takes
-- the function's arguments (the destination, the cap, the clock) is
-- planned again on every call whenever the custom plans look cheaper than
-- the generic one, which for these statements they always do: an empty
-- claim spent about 1.1 ms of its 1.2 ms planning a dozen statements, and
-- every wake-up of an idle relay paid it. Every statement the claim runs
-- reaches its rows through an index whatever its arguments (the partial
-- indexes' predicates are constants, enable_seqscan is off since 0008),
-- so the generic plans are the custom ones without the planning: an empty
-- claim now takes 0.35-0.4 ms.
ALTER FUNCTION {{T}}claim(timestamptz, text, int, bigint, text[], text[], text[], text[], text, text[], int[])
	SET plan_cache_mode = force_generic_plan;
