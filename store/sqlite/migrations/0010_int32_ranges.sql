-- attempts and failure_reason are 32-bit integers, as on PostgreSQL and
-- in the store's decoder (scan.go): the checks of migration 0003 refused
-- only a negative or non-integer attempts and a non-integer failure_reason,
-- so an attempts above 2147483647, or a failure_reason outside
-- [-2147483648, 2147483647], was written, then every listing and Get that
-- read the row failed. The checks and the index of undecodable rows now say
-- the same as the decoder: rows not yet dead-lettered that break the new
-- rules are quarantined at the next batch (quarantine.go clamps attempts to
-- the range and records failure_reason SerializationError).
--
-- Dead-lettered rows are not swept, so those already out of range (one
-- quarantined before this migration keeps its attempts) are mended here:
-- attempts clamped to the range, failure_reason Unknown (99).

UPDATE {{prefix}}outbox SET attempts = 2147483647
WHERE typeof(attempts) = 'integer' AND attempts > 2147483647 AND typeof(dead_lettered_at) = 'integer';
UPDATE {{prefix}}outbox SET failure_reason = 99
WHERE typeof(failure_reason) = 'integer' AND failure_reason NOT BETWEEN -2147483648 AND 2147483647
  AND typeof(dead_lettered_at) = 'integer';

DROP TRIGGER {{prefix}}outbox_check_attempts_insert;
DROP TRIGGER {{prefix}}outbox_check_attempts_update;
DROP TRIGGER {{prefix}}outbox_check_failure_reason_insert;
DROP TRIGGER {{prefix}}outbox_check_failure_reason_update;

CREATE TRIGGER {{prefix}}outbox_check_attempts_insert BEFORE INSERT ON {{prefix}}outbox
    WHEN typeof(NEW.attempts) <> 'integer' OR NEW.attempts NOT BETWEEN 0 AND 2147483647
BEGIN SELECT RAISE(ABORT, 'backstop: outbox.attempts must be an integer from 0 to 2147483647'); END;
CREATE TRIGGER {{prefix}}outbox_check_attempts_update BEFORE UPDATE OF attempts ON {{prefix}}outbox
    WHEN typeof(NEW.attempts) <> 'integer' OR NEW.attempts NOT BETWEEN 0 AND 2147483647
BEGIN SELECT RAISE(ABORT, 'backstop: outbox.attempts must be an integer from 0 to 2147483647'); END;

CREATE TRIGGER {{prefix}}outbox_check_failure_reason_insert BEFORE INSERT ON {{prefix}}outbox
    WHEN typeof(NEW.failure_reason) NOT IN ('integer', 'null') OR NEW.failure_reason NOT BETWEEN -2147483648 AND 2147483647
BEGIN SELECT RAISE(ABORT, 'backstop: outbox.failure_reason must be a 32-bit integer or NULL'); END;
CREATE TRIGGER {{prefix}}outbox_check_failure_reason_update BEFORE UPDATE OF failure_reason ON {{prefix}}outbox
    WHEN typeof(NEW.failure_reason) NOT IN ('integer', 'null') OR NEW.failure_reason NOT BETWEEN -2147483648 AND 2147483647
BEGIN SELECT RAISE(ABORT, 'backstop: outbox.failure_reason must be a 32-bit integer or NULL'); END;

-- The predicate is spelled exactly as quarantine.go's undecodable.
DROP INDEX {{prefix}}outbox_undecodable;
CREATE INDEX {{prefix}}outbox_undecodable ON {{prefix}}outbox (seq)
    WHERE (typeof(destination) <> 'text' OR destination = '') OR (typeof(type) <> 'text' OR type = '') OR (typeof(stream) <> 'text') OR (typeof(headers) <> 'text' OR CASE WHEN json_valid(headers) THEN json_type(headers) END IS NOT 'object') OR (typeof(status) <> 'integer' OR status < 0 OR status > 65535) OR (typeof(attempts) <> 'integer' OR attempts < 0 OR attempts > 2147483647) OR (typeof(failure_reason) NOT IN ('integer', 'null') OR failure_reason NOT BETWEEN -2147483648 AND 2147483647) OR (typeof(created_at) <> 'integer' OR created_at NOT BETWEEN -62135596800000 AND 253402300799999) OR (typeof(scheduled_for) NOT IN ('integer', 'null') OR scheduled_for NOT BETWEEN -62135596800000 AND 253402300799999) OR (typeof(lease_expiry) NOT IN ('integer', 'null') OR lease_expiry NOT BETWEEN -62135596800000 AND 253402300799999) OR (typeof(dead_lettered_at) NOT IN ('integer', 'null') OR dead_lettered_at NOT BETWEEN -62135596800000 AND 253402300799999) OR (typeof(first_failed_at) NOT IN ('integer', 'null') OR first_failed_at NOT BETWEEN -62135596800000 AND 253402300799999) OR (typeof(last_failed_at) NOT IN ('integer', 'null') OR last_failed_at NOT BETWEEN -62135596800000 AND 253402300799999) OR (typeof(stream_released_at) NOT IN ('integer', 'null') OR stream_released_at NOT BETWEEN -62135596800000 AND 253402300799999) OR (typeof(published_at) NOT IN ('integer', 'null') OR published_at NOT BETWEEN -62135596800000 AND 253402300799999);
