-- seq is the stream order and the claim's cursor, and plain SQL may write
-- it (it is the table's INTEGER PRIMARY KEY). Two values broke the store:
-- a seq below 1 in an ordered stream was never claimed (a stream's head
-- starts at 0, and the claim reads from its head up), while the messages
-- written after it in its stream were delivered ahead of it; and a seq of
-- 9223372036854775807 made AUTOINCREMENT fail every later insert, of
-- every destination, with "database or disk is full". A seq is now an
-- integer from 1 to 2^62, refused with an error naming the column
-- otherwise. The insert's check runs after the row is numbered: before
-- it, a seq left to SQLite reads as -1. Rows already there are left as
-- they are.
CREATE TRIGGER {{prefix}}outbox_check_seq_insert AFTER INSERT ON {{prefix}}outbox
    WHEN NEW.seq NOT BETWEEN 1 AND 4611686018427387904
BEGIN SELECT RAISE(ABORT, 'backstop: outbox.seq must be an integer from 1 to 4611686018427387904 (or left to the store)'); END;
CREATE TRIGGER {{prefix}}outbox_check_seq_update BEFORE UPDATE OF seq ON {{prefix}}outbox
    WHEN NEW.seq NOT BETWEEN 1 AND 4611686018427387904
BEGIN SELECT RAISE(ABORT, 'backstop: outbox.seq must be an integer from 1 to 4611686018427387904 (or left to the store)'); END;
