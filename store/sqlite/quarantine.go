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
		id, _ := uuid.Parse(lenientText(b.raw[1]))
		rejected, fatal := savepoint(ctx, tx, func() error { return s.quarantineRow(ctx, tx, instance, b, now) })
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
	errText := outbox.TruncateError(fmt.Sprintf("undecodable outbox row (seq %s): %s", lenientText(raw[0]), b.err))
	if _, err := tx.ExecContext(ctx, s.sql(`UPDATE {{prefix}}outbox SET dead_lettered_at = ?, instance_id = NULL,
		lease_expiry = NULL, failure_reason = ?, error = ? WHERE seq = ?`),
		now.UnixMilli(), int(reason), errText, raw[0]); err != nil {
		return err
	}
	e := quarantineEntry(raw, b.err, instance)
	e.Reason, e.ErrorMessage, e.FailureTime, e.LastAttemptTime = reason, errText, now, now
	return s.insertEntry(ctx, tx, e, now)
}

// quarantineEntry is the dead-letter entry of an undecodable row: what can
// be read of it, and the column, the value and the raw headers in its
// metadata.
func quarantineEntry(raw *rawRow, cause error, instance string) *dlq.Entry {
	e := &dlq.Entry{
		MessageID:   lenientText(raw[1]),
		Destination: lenientText(raw[2]),
		Stream:      lenientText(raw[3]),
		Type:        lenientText(raw[4]),
		Metadata:    map[string]any{"quarantined_by": instance},
	}
	var d decoder
	e.Payload = d.bytes(raw, 5)
	if h, err := decodeHeaders([]byte(lenientText(raw[6]))); err == nil {
		e.Headers = h
	} else {
		e.Metadata["raw_headers"] = lenientText(raw[6])
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

// lenientText spells any stored value as text.
func lenientText(v any) string {
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
