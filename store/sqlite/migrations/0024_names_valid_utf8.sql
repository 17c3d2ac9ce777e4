-- The outbox refuses a destination, stream or type that is not valid UTF-8,
-- written by plain SQL (CAST(x'ff61' AS TEXT); the Go API refuses one
-- already): the admin API, the dashboard and the CLI showed such a name
-- with U+FFFD in place of the bad bytes, and looking the shown name up
-- found nothing ("no undelivered messages" for a strict stream holding one,
-- blocked by its dead-lettered head), while the name itself was refused
-- ("must be UTF-8 without NUL", as PostgreSQL's text keeps nothing else):
-- no operator tool could release the stream
-- (TestPlainSQLNamesNotUTF8AreRefused). Rows already present are left as
-- they are, as 0021 leaves them.
--
-- SQLite has no test for valid UTF-8. A name holding a character beyond
-- ASCII is read character by character (substr, which splits after a lead
-- byte and its continuation bytes, as unicode() reads them): each
-- character must be the UTF-8 encoding of its own code point, which
-- unicode() and char() give for valid text only. unicode() reads
-- U+FFFE and U+FFFF, valid UTF-8, as U+FFFD: they are allowed by name. A
-- name in ASCII is not read further: the three in ASCII, as most are,
-- cost the insert one GLOB.

CREATE TRIGGER {{prefix}}outbox_check_names_utf8_insert BEFORE INSERT ON {{prefix}}outbox
    WHEN NEW.destination || NEW.stream || NEW.type GLOB '*[^' || char(1) || '-' || char(127) || ']*' AND EXISTS (SELECT 1
        FROM (SELECT NEW.destination AS name UNION ALL SELECT NEW.stream UNION ALL SELECT NEW.type) AS n,
            json_each(CASE WHEN n.name GLOB '*[^' || char(1) || '-' || char(127) || ']*'
                THEN '[' || rtrim(replace(hex(zeroblob(length(n.name))), '00', '0,'), ',') || ']' ELSE '[]' END) AS c
        WHERE CAST(substr(n.name, c.key + 1, 1) AS BLOB)
            NOT IN (CAST(char(unicode(substr(n.name, c.key + 1, 1))) AS BLOB), x'efbfbe', x'efbfbf'))
BEGIN SELECT RAISE(ABORT, 'backstop: outbox.destination, outbox.stream and outbox.type must be valid UTF-8'); END;
CREATE TRIGGER {{prefix}}outbox_check_names_utf8_update BEFORE UPDATE OF destination, stream, type ON {{prefix}}outbox
    WHEN NEW.destination || NEW.stream || NEW.type GLOB '*[^' || char(1) || '-' || char(127) || ']*' AND EXISTS (SELECT 1
        FROM (SELECT NEW.destination AS name UNION ALL SELECT NEW.stream UNION ALL SELECT NEW.type) AS n,
            json_each(CASE WHEN n.name GLOB '*[^' || char(1) || '-' || char(127) || ']*'
                THEN '[' || rtrim(replace(hex(zeroblob(length(n.name))), '00', '0,'), ',') || ']' ELSE '[]' END) AS c
        WHERE CAST(substr(n.name, c.key + 1, 1) AS BLOB)
            NOT IN (CAST(char(unicode(substr(n.name, c.key + 1, 1))) AS BLOB), x'efbfbe', x'efbfbf'))
BEGIN SELECT RAISE(ABORT, 'backstop: outbox.destination, outbox.stream and outbox.type must be valid UTF-8'); END;
