-- Backstop's PostgreSQL schema, version 7 ({{T}} and {{P}} as in 0001): the
-- ordering trigger fires only for rows it acts on. Before, every inserted
-- row called {{T}}outbox_order, which returned at once for unordered rows
-- (no stream, or ordering 'none'); a WHEN condition now skips the call, so
-- an unordered insert pays nothing for stream ordering. The condition is
-- the function's own test, negated.
DROP TRIGGER {{P}}outbox_order ON {{T}}outbox;

CREATE TRIGGER {{P}}outbox_order BEFORE INSERT ON {{T}}outbox
	FOR EACH ROW WHEN (NEW.stream <> '' AND NEW.ordering IS DISTINCT FROM 'none')
	EXECUTE FUNCTION {{T}}outbox_order();
