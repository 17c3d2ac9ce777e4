-- The dead-letter list's filter by status has an index in the list's
-- order (failure_time, id), as 0013 gave the filters by stream, reason and
-- fingerprint. Listing the resolved or replayed entries (the dashboard's
-- and the CLI's --status) walked the time index over every other entry to
-- find a page, and a bulk replay with no other filter (status pending)
-- walked every resolved and replayed one. Entries are written only when
-- messages fail for good, and change status only by an operator's action.
--
-- Version 16: 14 and 15 were taken by changes made at the same time.
CREATE INDEX {{prefix}}dead_letters_status ON {{prefix}}dead_letters (status, failure_time, id);
