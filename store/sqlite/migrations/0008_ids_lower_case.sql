-- An outbox id is stored in lower case, as PostgreSQL's uuid type stores
-- it. The store looks a row up by the lower-case text of its id (Go's
-- uuid.UUID.String), and SQLite's = is case-sensitive: a row an
-- application wrote with an upper-case id (as .NET spells a Guid) was
-- claimed and delivered, but its completion deleted nothing and its
-- failures counted as stale, so it was delivered again each time its lease
-- lapsed, for ever.
--
-- Existing ids are lower-cased. Where that would make two rows share an id
-- (an upper-case row whose lower-case twin is in the outbox too, or two
-- spellings of one id that differ only in case), the row that keeps the id
-- is the lower-case one, else the earliest; each other one gets a fresh
-- random id and stays in the outbox to be delivered. On PostgreSQL the
-- second spelling would have been refused as a duplicate; here both were
-- accepted as two messages, and neither is dropped: a consumer that
-- de-duplicates by message id sees them as two.
--
-- From now on the triggers below store an id written in upper case (by an
-- INSERT or an UPDATE of id) in lower case, so that an id that differs from
-- another only in case violates the UNIQUE constraint on id, as it does on
-- PostgreSQL. They only write when the id has an upper-case letter: Backstop
-- writes lower case, so its own inserts pay only the WHEN test. The
-- duplicate is refused before the row is written, so that INSERT OR IGNORE
-- (whose IGNORE would also apply to the trigger's UPDATE, leaving the row in
-- upper case beside its twin) fails too rather than keep it.
--
-- Dead-letter entries name their outbox message by message_id, compared
-- with the outbox id as text (dlq.go, gauges.go): a message_id in the form
-- of a UUID is lower-cased likewise, now and on every write; others (an
-- entry added by hand may name anything) are left as they are.

CREATE TEMP TABLE {{prefix}}ids_0008 (seq INTEGER PRIMARY KEY, old TEXT NOT NULL, new TEXT NOT NULL);

INSERT INTO temp.{{prefix}}ids_0008 (seq, old, new)
SELECT seq, id, CASE
    WHEN n > 1 OR EXISTS (SELECT 1 FROM {{prefix}}outbox k WHERE k.id = lower(r.id)) THEN
        lower(hex(randomblob(4))) || '-' || lower(hex(randomblob(2))) || '-4' ||
        substr(lower(hex(randomblob(2))), 2) || '-' ||
        substr('89ab', 1 + (abs(random()) % 4), 1) || substr(lower(hex(randomblob(2))), 2) || '-' ||
        lower(hex(randomblob(6)))
    ELSE lower(id) END
FROM (SELECT seq, id, row_number() OVER (PARTITION BY lower(id) ORDER BY seq) AS n
      FROM {{prefix}}outbox WHERE id <> lower(id)) AS r;

UPDATE {{prefix}}dead_letters SET message_id = (SELECT new FROM temp.{{prefix}}ids_0008 WHERE old = message_id)
WHERE message_id IN (SELECT old FROM temp.{{prefix}}ids_0008);

UPDATE {{prefix}}outbox SET id = (SELECT new FROM temp.{{prefix}}ids_0008 m WHERE m.seq = {{prefix}}outbox.seq)
WHERE seq IN (SELECT seq FROM temp.{{prefix}}ids_0008);

DROP TABLE temp.{{prefix}}ids_0008;

UPDATE {{prefix}}dead_letters SET message_id = lower(message_id)
WHERE message_id <> lower(message_id)
  AND length(message_id) = 36 AND length(replace(message_id, '-', '')) = 32 AND NOT message_id GLOB '*[^0-9a-fA-F-]*'
  AND substr(message_id, 9, 1) = '-' AND substr(message_id, 14, 1) = '-' AND substr(message_id, 19, 1) = '-' AND substr(message_id, 24, 1) = '-';

CREATE TRIGGER {{prefix}}outbox_id_unique_insert BEFORE INSERT ON {{prefix}}outbox
    WHEN NEW.id <> lower(NEW.id) AND EXISTS (SELECT 1 FROM {{prefix}}outbox WHERE id = lower(NEW.id))
BEGIN SELECT RAISE(ABORT, 'UNIQUE constraint failed: outbox.id (the id in lower case is taken)'); END;
CREATE TRIGGER {{prefix}}outbox_id_unique_update BEFORE UPDATE OF id ON {{prefix}}outbox
    WHEN NEW.id <> lower(NEW.id) AND EXISTS (SELECT 1 FROM {{prefix}}outbox WHERE id = lower(NEW.id) AND seq <> OLD.seq)
BEGIN SELECT RAISE(ABORT, 'UNIQUE constraint failed: outbox.id (the id in lower case is taken)'); END;
CREATE TRIGGER {{prefix}}outbox_id_lower_insert AFTER INSERT ON {{prefix}}outbox
    WHEN NEW.id <> lower(NEW.id)
BEGIN UPDATE {{prefix}}outbox SET id = lower(NEW.id) WHERE seq = NEW.seq; END;
CREATE TRIGGER {{prefix}}outbox_id_lower_update AFTER UPDATE OF id ON {{prefix}}outbox
    WHEN NEW.id <> lower(NEW.id)
BEGIN UPDATE {{prefix}}outbox SET id = lower(NEW.id) WHERE seq = NEW.seq; END;

CREATE TRIGGER {{prefix}}dead_letters_message_id_lower_insert AFTER INSERT ON {{prefix}}dead_letters
    WHEN NEW.message_id <> lower(NEW.message_id)
      AND length(NEW.message_id) = 36 AND length(replace(NEW.message_id, '-', '')) = 32 AND NOT NEW.message_id GLOB '*[^0-9a-fA-F-]*'
      AND substr(NEW.message_id, 9, 1) = '-' AND substr(NEW.message_id, 14, 1) = '-' AND substr(NEW.message_id, 19, 1) = '-' AND substr(NEW.message_id, 24, 1) = '-'
BEGIN UPDATE {{prefix}}dead_letters SET message_id = lower(NEW.message_id) WHERE rowid = NEW.rowid; END;
CREATE TRIGGER {{prefix}}dead_letters_message_id_lower_update AFTER UPDATE OF message_id ON {{prefix}}dead_letters
    WHEN NEW.message_id <> lower(NEW.message_id)
      AND length(NEW.message_id) = 36 AND length(replace(NEW.message_id, '-', '')) = 32 AND NOT NEW.message_id GLOB '*[^0-9a-fA-F-]*'
      AND substr(NEW.message_id, 9, 1) = '-' AND substr(NEW.message_id, 14, 1) = '-' AND substr(NEW.message_id, 19, 1) = '-' AND substr(NEW.message_id, 24, 1) = '-'
BEGIN UPDATE {{prefix}}dead_letters SET message_id = lower(NEW.message_id) WHERE rowid = NEW.rowid; END;
