package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// msgCols are the outbox columns rawMessage reads, in its order.
const msgCols = `seq, id, destination, stream, type, payload, headers, ordering,
	status, attempts, failure_reason, error, fingerprint, scheduled_for,
	instance_id, lease_expiry, created_at, dead_lettered_at`

// withoutPayload is a column list (msgCols, dlCols) that reads an empty
// payload instead of the stored one.
func withoutPayload(cols string) string {
	return strings.Replace(cols, "payload,", "''::bytea AS payload,", 1)
}

// msgColsOf is msgCols qualified with a table alias.
func msgColsOf(alias string) string {
	return alias + `.seq, ` + alias + `.id, ` + alias + `.destination, ` + alias + `.stream, ` +
		alias + `.type, ` + alias + `.payload, ` + alias + `.headers, ` + alias + `.ordering, ` +
		alias + `.status, ` + alias + `.attempts, ` + alias + `.failure_reason, ` + alias + `.error, ` +
		alias + `.fingerprint, ` + alias + `.scheduled_for, ` + alias + `.instance_id, ` +
		alias + `.lease_expiry, ` + alias + `.created_at, ` + alias + `.dead_lettered_at`
}

// rawMessage is one row of msgCols scanned into types that accept every
// value the columns can hold (NULL, infinite times), so that reading a row
// never fails; decode then checks the values.
type rawMessage struct {
	seq                             pgtype.Int8
	id                              pgtype.UUID
	destination, stream, typ        pgtype.Text
	payload, headers                []byte
	ordering, errText, fp, instance pgtype.Text
	status, attempts, reason        pgtype.Int4
	sched, lease, created, dead     pgtype.Timestamptz
	// the sizes of the payload and headers, read by a claim (claimDest)
	payloadLen, headersLen pgtype.Int8
}

func (r *rawMessage) dest() []any {
	// room for claimDest's two more, so that it does not copy
	return append(make([]any, 0, 20), &r.seq, &r.id, &r.destination, &r.stream, &r.typ, &r.payload, &r.headers, &r.ordering,
		&r.status, &r.attempts, &r.reason, &r.errText, &r.fp, &r.sched, &r.instance, &r.lease, &r.created, &r.dead)
}

// claimDest is dest and the sizes a claim reads after msgCols (claimSQL).
func (r *rawMessage) claimDest() []any { return append(r.dest(), &r.payloadLen, &r.headersLen) }

// decode checks the row's values and turns them into a message, or
// returns a *store.ColumnError for the first value it cannot use.
func (r *rawMessage) decode() (*outbox.Message, error) {
	m, err := r.decodeAll()
	if err != nil {
		return nil, err
	}
	return m, nil
}

// decodeAll turns the row into a message whatever its values: each value
// it cannot use is left zero, and the first is returned as a
// *store.ColumnError beside the message.
func (r *rawMessage) decodeAll() (*outbox.Message, error) {
	var first error
	bad := func(col string, v any, problem string) {
		if first == nil {
			first = &store.ColumnError{Column: col, Value: v, Problem: problem}
		}
	}
	text := func(col string, t pgtype.Text, required bool) string {
		switch {
		case !t.Valid && required:
			bad(col, nil, "is NULL")
		case required && t.String == "":
			bad(col, "", "is empty")
		}
		return t.String
	}
	when := func(col string, t pgtype.Timestamptz, required bool) time.Time {
		switch {
		case !t.Valid && required:
			bad(col, nil, "is NULL")
		case !t.Valid:
		case t.InfinityModifier == pgtype.Infinity:
			bad(col, "infinity", "is not a finite time")
		case t.InfinityModifier == pgtype.NegativeInfinity:
			bad(col, "-infinity", "is not a finite time")
		case t.Time.Before(outbox.MinTime) || t.Time.After(outbox.MaxTime):
			// PostgreSQL keeps years up to 294276; a message cannot carry
			// them, and JSON cannot show them (time.Time.MarshalJSON).
			bad(col, t.Time.UTC().Format(time.RFC3339Nano), "is outside the years 1 to 9999")
		default:
			return t.Time.UTC()
		}
		return time.Time{}
	}
	var m outbox.Message
	if !r.seq.Valid {
		bad("seq", nil, "is NULL")
	}
	m.Seq = r.seq.Int64
	if !r.id.Valid {
		bad("id", nil, "is NULL")
	}
	m.ID = uuid.UUID(r.id.Bytes)
	m.Destination = text("destination", r.destination, true)
	m.Stream = text("stream", r.stream, false)
	m.Type = text("type", r.typ, true)
	m.Payload = r.payload
	if m.Payload == nil {
		m.Payload = []byte{}
	}
	h, err := store.DecodeHeaders(r.headers)
	if err != nil {
		bad("headers", string(r.headers), err.Error())
	}
	m.Headers = h
	m.Ordering = outbox.Ordering(r.ordering.String)
	if m.Ordering.Validate() != nil {
		bad("ordering", r.ordering.String, "is not strict, release or none")
		m.Ordering = ""
	}
	switch {
	case !r.status.Valid:
		bad("status", nil, "is NULL")
	case r.status.Int32 < 0 || r.status.Int32 > store.MaxStatus:
		bad("status", int64(r.status.Int32), fmt.Sprintf("is out of range [0, %d]", store.MaxStatus))
	default:
		m.Status = outbox.Status(r.status.Int32)
	}
	switch {
	case !r.attempts.Valid:
		bad("attempts", nil, "is NULL")
	case r.attempts.Int32 < 0:
		bad("attempts", int64(r.attempts.Int32), "is negative")
	default:
		m.Attempts = int(r.attempts.Int32)
	}
	if r.reason.Valid {
		m.FailureReason = errorhandling.FailureReason(r.reason.Int32)
	}
	m.Error, m.Fingerprint, m.InstanceID = r.errText.String, r.fp.String, r.instance.String
	m.ScheduledFor = when("scheduled_for", r.sched, false)
	m.LeaseExpiry = when("lease_expiry", r.lease, false)
	m.CreatedAt = when("created_at", r.created, true)
	m.DeadLetteredAt = when("dead_lettered_at", r.dead, false)
	return &m, first
}

// scanShown reads one row of msgCols for an operator's view: a value it
// cannot use is left zero and named in Error (store.ShowUndecodable).
func scanShown(row pgx.Row) (*outbox.Message, error) {
	var r rawMessage
	if err := row.Scan(r.dest()...); err != nil {
		return nil, err
	}
	m, err := r.decodeAll()
	if err != nil {
		store.ShowUndecodable(m, err)
	}
	return m, nil
}

// collectMessages reads every row of msgCols for an operator's view
// (scanShown).
func collectMessages(rows pgx.Rows) ([]*outbox.Message, error) {
	defer rows.Close()
	var out []*outbox.Message
	for rows.Next() {
		m, err := scanShown(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// encodeHeaders writes headers as a JSON object ("{}" when empty).
func encodeHeaders(h map[string]string) (string, error) {
	if len(h) == 0 {
		return "{}", nil
	}
	b, err := json.Marshal(h)
	if err != nil {
		return "", fmt.Errorf("postgres: encode headers: %w", err)
	}
	return string(b), nil
}

func derefTime(p *time.Time) time.Time {
	if p == nil {
		return time.Time{}
	}
	return p.UTC()
}

// nullTime maps the zero time to NULL.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// nullString maps "" to NULL.
func nullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// micros is d in whole microseconds, the unit statements take durations in.
func micros(d time.Duration) int64 { return d.Microseconds() }

// retryable reports whether err is a serialization failure or a deadlock,
// after which the whole transaction is run again.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// maxTxAttempts bounds how often a transaction is retried after a
// serialization failure or deadlock.
const maxTxAttempts = 10

// retryTx runs fn until it does not fail with a retryable error, at most
// maxTxAttempts times, backing off a little between tries.
func retryTx(ctx context.Context, fn func() error) error {
	var err error
	for i := range maxTxAttempts {
		if err = fn(); err == nil || !retryable(err) {
			return err
		}
		t := time.NewTimer(time.Duration(i+1) * 5 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		case <-t.C:
		}
	}
	return err
}

// pgUUID converts id for a uuid parameter. pgx encodes a pgtype.UUID
// straight into the binary format; a uuid.UUID is a driver.Valuer, which
// pgx first tries to encode as its text, building and discarding an error,
// before it parses the text: for an array of 100 ids that was a third of
// the CPU of an Enqueue.
func pgUUID(id uuid.UUID) pgtype.UUID { return pgtype.UUID{Bytes: id, Valid: true} }

// pgUUIDs converts ids for a uuid[] parameter (see pgUUID).
func pgUUIDs(ids []uuid.UUID) []pgtype.UUID {
	out := make([]pgtype.UUID, len(ids))
	for i, id := range ids {
		out[i] = pgUUID(id)
	}
	return out
}
