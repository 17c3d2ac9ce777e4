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

-- The outbox refuses values the store cannot read back, so that another
-- language's bug is caught by the INSERT or UPDATE that makes it, with an
-- error naming the constraint (and so the column). The constraints are
-- added NOT VALID: rows already present that break them do not make this
-- migration fail. The store finds such rows through the partial index
-- below and dead-letters each (reason SerializationError) at its next
-- batch, mending the values the constraints refuse (store/postgres,
-- quarantine.go).
ALTER TABLE {{T}}outbox
	ADD CONSTRAINT {{P}}outbox_destination_not_empty CHECK (destination <> '') NOT VALID,
	ADD CONSTRAINT {{P}}outbox_type_not_empty CHECK (type <> '') NOT VALID,
	ADD CONSTRAINT {{P}}outbox_status_range CHECK (status BETWEEN 0 AND 65535) NOT VALID,
	ADD CONSTRAINT {{P}}outbox_attempts_not_negative CHECK (attempts >= 0) NOT VALID,
	ADD CONSTRAINT {{P}}outbox_headers_object CHECK (jsonb_typeof(headers) = 'object') NOT VALID,
	ADD CONSTRAINT {{P}}outbox_times_finite CHECK (isfinite(created_at) AND isfinite(scheduled_for)
		AND isfinite(lease_expiry) AND isfinite(dead_lettered_at) AND isfinite(first_failed_at)
		AND isfinite(last_failed_at) AND isfinite(stream_released_at) AND isfinite(published_at)) NOT VALID;

-- Rows the store cannot decode (the constraints' rules): empty unless old
-- rows break them. The predicate is spelled as in quarantine.go's sweep.
CREATE INDEX {{P}}outbox_invalid_idx ON {{T}}outbox (seq)
	WHERE NOT (destination <> '' AND type <> '' AND status BETWEEN 0 AND 65535 AND attempts >= 0 AND jsonb_typeof(headers) = 'object' AND isfinite(created_at) AND coalesce(isfinite(scheduled_for), true) AND coalesce(isfinite(lease_expiry), true) AND coalesce(isfinite(dead_lettered_at), true) AND coalesce(isfinite(first_failed_at), true) AND coalesce(isfinite(last_failed_at), true) AND coalesce(isfinite(stream_released_at), true) AND coalesce(isfinite(published_at), true));
