package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
)

// msgCols are the outbox columns scanMessage reads, in its order.
const msgCols = `seq, id, destination, stream, type, payload, headers, ordering,
	status, attempts, failure_reason, error, fingerprint, scheduled_for,
	instance_id, lease_expiry, created_at, dead_lettered_at`

// msgColsOf is msgCols qualified with a table alias.
func msgColsOf(alias string) string {
	return alias + `.seq, ` + alias + `.id, ` + alias + `.destination, ` + alias + `.stream, ` +
		alias + `.type, ` + alias + `.payload, ` + alias + `.headers, ` + alias + `.ordering, ` +
		alias + `.status, ` + alias + `.attempts, ` + alias + `.failure_reason, ` + alias + `.error, ` +
		alias + `.fingerprint, ` + alias + `.scheduled_for, ` + alias + `.instance_id, ` +
		alias + `.lease_expiry, ` + alias + `.created_at, ` + alias + `.dead_lettered_at`
}

// scanMessage reads one row of msgCols.
func scanMessage(row pgx.Row) (*outbox.Message, error) {
	var (
		m                                 outbox.Message
		headers                           []byte
		ordering, errText, fp, instanceID *string
		reason                            *int32
		status                            int32
		sched, lease, dead                *time.Time
	)
	err := row.Scan(&m.Seq, &m.ID, &m.Destination, &m.Stream, &m.Type, &m.Payload, &headers,
		&ordering, &status, &m.Attempts, &reason, &errText, &fp, &sched, &instanceID,
		&lease, &m.CreatedAt, &dead)
	if err != nil {
		return nil, err
	}
	m.Status = outbox.Status(status)
	m.Headers = decodeHeaders(headers)
	m.Ordering = outbox.Ordering(deref(ordering))
	if reason != nil {
		m.FailureReason = errorhandling.FailureReason(*reason)
	}
	m.Error, m.Fingerprint, m.InstanceID = deref(errText), deref(fp), deref(instanceID)
	m.ScheduledFor, m.LeaseExpiry, m.DeadLetteredAt = derefTime(sched), derefTime(lease), derefTime(dead)
	m.CreatedAt = m.CreatedAt.UTC()
	if m.Payload == nil {
		m.Payload = []byte{}
	}
	return &m, nil
}

// collectMessages reads every row of msgCols.
func collectMessages(rows pgx.Rows) ([]*outbox.Message, error) {
	defer rows.Close()
	var out []*outbox.Message
	for rows.Next() {
		m, err := scanMessage(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// decodeHeaders reads a headers object. Rows written with plain SQL may
// hold non-string values; they are kept in their JSON spelling.
func decodeHeaders(b []byte) map[string]string {
	if len(b) == 0 {
		return nil
	}
	var raw map[string]json.RawMessage
	if json.Unmarshal(b, &raw) != nil || len(raw) == 0 {
		return nil
	}
	out := make(map[string]string, len(raw))
	for k, v := range raw {
		var s string
		if json.Unmarshal(v, &s) == nil {
			out[k] = s
		} else {
			out[k] = string(v)
		}
	}
	return out
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

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
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

// uuidStrings formats ids for a uuid[] parameter.
func uuidStrings(ids []uuid.UUID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.String()
	}
	return out
}
