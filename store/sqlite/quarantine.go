package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// quarantine dead-letters each claimed row that could not be decoded, on
// its own, with reason SerializationError and the decoding error (which
// names the column and the value): the row is marked dead-lettered and its
// lease cleared, and its entry copies what can be read of it. A row whose
// quarantine the database refuses keeps its lease and is tried again when
// the lease lapses; the rest of the batch is unaffected.
func (s *Store) quarantine(ctx context.Context, tx *sql.Tx, instance string, bad []badRow, res *store.Result, now time.Time) error {
	for _, b := range bad {
		id, _ := uuid.Parse(LenientText(b.raw[1]))
		rejected, fatal := s.savepoint(ctx, tx, func() error { return s.quarantineRow(ctx, tx, instance, b, now) })
		if fatal != nil {
			return fmt.Errorf("quarantine seq %v: %w", b.raw[0], fatal)
		}
		if rejected != nil {
			s.cfg.Log().LogAttrs(ctx, slog.LevelError, "quarantining an outbox row failed", slog.String("store", "sqlite"),
				slog.String("message_id", id.String()), slog.String("error", outbox.TruncateError(rejected.Error())))
			continue
		}
		res.Quarantined = append(res.Quarantined, id)
	}
	return nil
}

func (s *Store) quarantineRow(ctx context.Context, tx *sql.Tx, instance string, b badRow, now time.Time) error {
	raw := b.raw
	reason := errorhandling.ReasonSerializationError
	errText := outbox.TruncateError(fmt.Sprintf("undecodable outbox row (seq %s): %s", LenientText(raw[0]), b.err))
	if _, err := tx.ExecContext(ctx, s.sql(mendSQL), sql.Named("now", now.UnixMilli()), sql.Named("reason", int(reason)),
		sql.Named("err", errText), sql.Named("seq", raw[0])); err != nil {
		return err
	}
	e := quarantineEntry(raw, b.err, instance)
	e.Reason, e.ErrorMessage, e.FailureTime, e.LastAttemptTime = reason, errText, now, now
	return s.insertEntry(ctx, tx, e, now)
}

// mendSQL dead-letters an undecodable row and mends the values the store
// (and the checks of migrations 0003 and 0010) cannot read, so that no
// query trips over them again: its lease and due time are cleared, times
// that are not unix milliseconds cleared (now for created_at), a status
// or attempts that is not an integer in range reset (an attempts above
// 2^31-1 clamped to it), the failure reason set to SerializationError,
// headers that are not an object emptied, a destination or type that is
// not non-empty text named "(empty)" or spelled as text. The dead-letter
// entry's error and metadata keep the bad value.
const mendSQL = `UPDATE {{prefix}}outbox SET dead_lettered_at = :now, instance_id = NULL, lease_expiry = NULL,
	scheduled_for = NULL, failure_reason = :reason, error = :err,
	destination = CASE WHEN typeof(destination) <> 'text' OR destination = '' THEN coalesce(nullif(CAST(destination AS TEXT), ''), '(empty)') ELSE destination END,
	type = CASE WHEN typeof(type) <> 'text' OR type = '' THEN coalesce(nullif(CAST(type AS TEXT), ''), '(empty)') ELSE type END,
	stream = CASE WHEN typeof(stream) <> 'text' THEN coalesce(CAST(stream AS TEXT), '') ELSE stream END,
	headers = CASE WHEN typeof(headers) <> 'text' OR CASE WHEN json_valid(headers) THEN json_type(headers) END IS NOT 'object' THEN '{}' ELSE headers END,
	status = CASE WHEN typeof(status) <> 'integer' OR status < 0 OR status > 65535 THEN 1 ELSE status END,
	attempts = CASE WHEN typeof(attempts) <> 'integer' OR attempts < 0 THEN 0 WHEN attempts > 2147483647 THEN 2147483647 ELSE attempts END,
	created_at = CASE WHEN typeof(created_at) <> 'integer' OR created_at NOT BETWEEN ` + millisRange + ` THEN :now ELSE created_at END,
	first_failed_at = CASE WHEN typeof(first_failed_at) = 'integer' AND first_failed_at BETWEEN ` + millisRange + ` THEN first_failed_at END,
	last_failed_at = CASE WHEN typeof(last_failed_at) = 'integer' AND last_failed_at BETWEEN ` + millisRange + ` THEN last_failed_at END,
	stream_released_at = CASE WHEN typeof(stream_released_at) = 'integer' AND stream_released_at BETWEEN ` + millisRange + ` THEN stream_released_at END,
	published_at = CASE WHEN typeof(published_at) = 'integer' AND published_at BETWEEN ` + millisRange + ` THEN published_at END
WHERE seq = :seq`

// millisRange is the range of stored times, as BETWEEN's operands.
const millisRange = `-62135596800000 AND 253402300799999`

// quarantineEntry is the dead-letter entry of an undecodable row: what can
// be read of it, and the column, the value and the raw headers in its
// metadata.
func quarantineEntry(raw *rawRow, cause error, instance string) *dlq.Entry {
	e := &dlq.Entry{
		MessageID:   LenientText(raw[1]),
		Destination: LenientText(raw[2]),
		Stream:      LenientText(raw[3]),
		Type:        LenientText(raw[4]),
		Metadata:    map[string]any{"quarantined_by": instance},
	}
	var d decoder
	e.Payload = d.bytes(raw, 5)
	if h, err := store.DecodeHeaders([]byte(LenientText(raw[6]))); err == nil {
		e.Headers = h
	} else {
		e.Metadata["raw_headers"] = LenientText(raw[6])
	}
	if n, ok := raw[0].(int64); ok {
		e.Seq = n
	}
	if n, ok := raw[9].(int64); ok && n >= 0 && n <= 1<<31-1 {
		e.Attempts = int(n)
	}
	if ce, ok := cause.(*store.ColumnError); ok {
		e.Metadata["column"] = ce.Column
		e.Metadata["value"] = store.FormatValue(ce.Value)
	}
	return e
}

// LenientText spells any value SQLite stores as text: "" for NULL, a
// number spelled out, a blob's bytes as they are.
func LenientText(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case []byte:
		return string(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	return fmt.Sprint(v)
}

// undecodable is the WHERE clause of the partial index outbox_undecodable
// (as migration 0010 re-creates it), spelled exactly as there so that the
// sweep's query uses the index: the rows whose stored values the decoder
// refuses (scan.go's ranges: attempts and failure_reason are 32-bit).
const undecodable = `(typeof(destination) <> 'text' OR destination = '') OR (typeof(type) <> 'text' OR type = '') OR (typeof(stream) <> 'text') OR (typeof(headers) <> 'text' OR CASE WHEN json_valid(headers) THEN json_type(headers) END IS NOT 'object') OR (typeof(status) <> 'integer' OR status < 0 OR status > 65535) OR (typeof(attempts) <> 'integer' OR attempts < 0 OR attempts > 2147483647) OR (typeof(failure_reason) NOT IN ('integer', 'null') OR failure_reason NOT BETWEEN -2147483648 AND 2147483647) OR (typeof(created_at) <> 'integer' OR created_at NOT BETWEEN -62135596800000 AND 253402300799999) OR (typeof(scheduled_for) NOT IN ('integer', 'null') OR scheduled_for NOT BETWEEN -62135596800000 AND 253402300799999) OR (typeof(lease_expiry) NOT IN ('integer', 'null') OR lease_expiry NOT BETWEEN -62135596800000 AND 253402300799999) OR (typeof(dead_lettered_at) NOT IN ('integer', 'null') OR dead_lettered_at NOT BETWEEN -62135596800000 AND 253402300799999) OR (typeof(first_failed_at) NOT IN ('integer', 'null') OR first_failed_at NOT BETWEEN -62135596800000 AND 253402300799999) OR (typeof(last_failed_at) NOT IN ('integer', 'null') OR last_failed_at NOT BETWEEN -62135596800000 AND 253402300799999) OR (typeof(stream_released_at) NOT IN ('integer', 'null') OR stream_released_at NOT BETWEEN -62135596800000 AND 253402300799999) OR (typeof(published_at) NOT IN ('integer', 'null') OR published_at NOT BETWEEN -62135596800000 AND 253402300799999)`

// sweepSQL selects the undecodable rows not yet dead-lettered (a
// dead_lettered_at that is not an integer is itself undecodable). The
// inner query reads the index alone: SQLite cannot match the partial
// index's WHERE once another term is AND-ed to it.
const sweepSQL = `SELECT ` + messageColumns + ` FROM {{prefix}}outbox
	WHERE seq IN (SELECT seq FROM {{prefix}}outbox INDEXED BY {{prefix}}outbox_undecodable WHERE ` + undecodable + `)
	  AND typeof(dead_lettered_at) <> 'integer'
	ORDER BY seq LIMIT ?`

// sweepLimit bounds how many undecodable rows one batch quarantines.
const sweepLimit = 100

// sweep finds rows that cannot be decoded among those not yet
// dead-lettered, whether or not a claim would take them (a text
// scheduled_for is never due), so they are quarantined with the claimed
// ones. The index outbox_undecodable keeps it free when there are none.
func (s *Store) sweep(ctx context.Context, tx *sql.Tx) ([]badRow, error) {
	rows, err := tx.StmtContext(ctx, s.sweepStmt).QueryContext(ctx, sweepLimit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var bad []badRow
	for rows.Next() {
		r, err := scanRaw(rows)
		if err != nil {
			return nil, err
		}
		if _, err = r.decode(); err == nil {
			// The index takes only rows the store cannot keep; the
			// decoder does not read the times below, so one of them is
			// what is wrong. Left alone, such a row came back first in
			// every sweep: a hundred of them filled sweepLimit, and no row
			// that came later was ever quarantined.
			err = &store.ColumnError{Column: "first_failed_at, last_failed_at, stream_released_at or published_at",
				Problem: "is not a unix-millisecond time the store can keep"}
		}
		bad = append(bad, badRow{raw: r, err: err})
	}
	return bad, rows.Err()
}
