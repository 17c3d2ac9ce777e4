-- Backstop's PostgreSQL schema, version 2 ({{T}} and {{P}} as in 0001).

-- Dead-letter lifecycle: an entry is pending, replayed or resolved, and
-- records who replayed or resolved it and why. Entries already replayed
-- become 'replayed' (unless resolved since).
DO $$
DECLARE c text;
BEGIN
	FOR c IN SELECT conname FROM pg_constraint
		WHERE conrelid = '{{T}}dead_letters'::regclass AND contype = 'c'
			AND pg_get_constraintdef(oid) LIKE '%status%'
	LOOP
		EXECUTE format('ALTER TABLE {{T}}dead_letters DROP CONSTRAINT %I', c);
	END LOOP;
END
$$;
ALTER TABLE {{T}}dead_letters
	ADD COLUMN resolved_by  text NOT NULL DEFAULT '',
	ADD COLUMN replayed_by  text NOT NULL DEFAULT '',
	ADD COLUMN replay_notes text NOT NULL DEFAULT '';
UPDATE {{T}}dead_letters SET status = 'replayed' WHERE status = 'pending' AND replayed;
ALTER TABLE {{T}}dead_letters ADD CONSTRAINT {{P}}dead_letters_status_check
	CHECK (status IN ('pending', 'replayed', 'resolved'));

-- The queue's depth (Count, gauges): pending entries.
CREATE INDEX {{P}}dead_letters_pending_idx ON {{T}}dead_letters (failure_time)
	WHERE status = 'pending';
