package sqlite

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
)

// messageColumns are the outbox columns scanMessage reads, in its order.
const messageColumns = `seq, id, destination, stream, type, payload, headers, ordering, status, attempts,
	failure_reason, error, fingerprint, scheduled_for, instance_id, lease_expiry, created_at, dead_lettered_at`

// scanner is a *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

// withLeading scans extra leading columns before the ones its caller asks
// for.
type withLeading struct {
	sc    scanner
	extra []any
}

func (w withLeading) Scan(dest ...any) error { return w.sc.Scan(append(w.extra, dest...)...) }

// scanMessage reads one row of messageColumns.
func scanMessage(sc scanner) (*outbox.Message, error) {
	var (
		m                                 outbox.Message
		id, headers                       string
		ordering, errText, fp, instance   sql.NullString
		reason                            sql.NullInt64
		scheduled, lease, created, deadAt sql.NullInt64
		payload                           []byte
	)
	if err := sc.Scan(&m.Seq, &id, &m.Destination, &m.Stream, &m.Type, &payload, &headers, &ordering,
		&m.Status, &m.Attempts, &reason, &errText, &fp, &scheduled, &instance, &lease, &created, &deadAt); err != nil {
		return nil, err
	}
	var err error
	if m.ID, err = uuid.Parse(id); err != nil {
		return nil, fmt.Errorf("message seq %d: bad id %q: %w", m.Seq, id, err)
	}
	m.Headers = decodeHeaders(headers)
	m.Payload = payload
	m.Ordering = outbox.Ordering(ordering.String)
	m.FailureReason = errorhandling.FailureReason(reason.Int64)
	m.Error, m.Fingerprint, m.InstanceID = errText.String, fp.String, instance.String
	m.ScheduledFor, m.LeaseExpiry = fromMillis(scheduled), fromMillis(lease)
	m.CreatedAt, m.DeadLetteredAt = fromMillis(created), fromMillis(deadAt)
	return &m, nil
}

// scanMessages reads every row and closes rows.
func scanMessages(rows *sql.Rows) ([]*outbox.Message, error) {
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

// decodeHeaders reads the headers column. Rows written with plain SQL may
// hold any JSON there: non-string values are formatted, and a value that is
// not an object is kept whole under InvalidHeadersKey, so that one odd row
// never fails a claim.
func decodeHeaders(s string) map[string]string {
	if s == "" || s == "{}" {
		return nil
	}
	var h map[string]string
	if json.Unmarshal([]byte(s), &h) == nil {
		return h
	}
	var loose map[string]any
	if json.Unmarshal([]byte(s), &loose) == nil {
		h = make(map[string]string, len(loose))
		for k, v := range loose {
			h[k] = fmt.Sprint(v)
		}
		return h
	}
	return map[string]string{InvalidHeadersKey: s}
}

// InvalidHeadersKey holds the raw headers column of a row whose headers are
// not a JSON object.
const InvalidHeadersKey = "X-Backstop-Invalid-Headers"

// fromMillis turns a stored unix-millisecond time into a UTC time; NULL is
// the zero time.
func fromMillis(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return time.UnixMilli(v.Int64).UTC()
}

// nullMillis stores t as unix milliseconds; the zero time is NULL.
func nullMillis(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMilli()
}

// nullString stores s, or NULL when it is empty.
func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// blob stores b as a BLOB; nil stays NULL.
func blob(b []byte) any {
	if b == nil {
		return nil
	}
	return b
}
