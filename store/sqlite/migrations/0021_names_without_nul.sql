-- The outbox refuses a destination, stream or type holding a NUL byte,
-- written by plain SQL (the Go API refuses one already): no operator tool
-- can name such a stream (the admin API and the CLI take names as UTF-8
-- text without NUL, as PostgreSQL keeps them), so a strict stream 'a\0'
-- whose head was dead-lettered stayed blocked for good, and its dead letter
-- showed it as 'a', another stream
-- (TestPlainSQLNamesWithNULAreRefused). Rows already present are left
-- as they are, as 0003's checks leave them.

CREATE TRIGGER {{prefix}}outbox_check_names_nul_insert BEFORE INSERT ON {{prefix}}outbox
    WHEN instr(CAST(NEW.destination AS BLOB), x'00') > 0 OR instr(CAST(NEW.stream AS BLOB), x'00') > 0
        OR instr(CAST(NEW.type AS BLOB), x'00') > 0
BEGIN SELECT RAISE(ABORT, 'backstop: outbox.destination, outbox.stream and outbox.type must not hold a NUL byte'); END;
CREATE TRIGGER {{prefix}}outbox_check_names_nul_update BEFORE UPDATE OF destination, stream, type ON {{prefix}}outbox
    WHEN instr(CAST(NEW.destination AS BLOB), x'00') > 0 OR instr(CAST(NEW.stream AS BLOB), x'00') > 0
        OR instr(CAST(NEW.type AS BLOB), x'00') > 0
BEGIN SELECT RAISE(ABORT, 'backstop: outbox.destination, outbox.stream and outbox.type must not hold a NUL byte'); END;
