package sqlite

import (
	"database/sql"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// messageColumns are the outbox columns scanMessage reads, in its order.
const messageColumns = `seq, id, destination, stream, type, payload, headers, ordering, status, attempts,
	failure_reason, error, fingerprint, scheduled_for, instance_id, lease_expiry, created_at, dead_lettered_at`

// withoutPayload is a column list (messageColumns, entryColumns) that
// reads an empty payload instead of the stored one.
func withoutPayload(cols string) string {
	return strings.Replace(cols, "payload,", "X'' AS payload,", 1)
}

// columnNames are messageColumns one by one.
var columnNames = []string{"seq", "id", "destination", "stream", "type", "payload", "headers", "ordering", "status",
	"attempts", "failure_reason", "error", "fingerprint", "scheduled_for", "instance_id", "lease_expiry", "created_at",
	"dead_lettered_at"}

// scanner is a *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

// withLeading scans extra leading columns before the ones its caller asks
// for.
type withLeading struct {
	sc    scanner
	extra []any
}

func (w withLeading) Scan(dest ...any) error { return w.sc.Scan(append(w.extra, dest...)...) }

// rawRow is one row of messageColumns as SQLite stored it: int64, float64,
// string, []byte or nil per column, whatever the column's declared type.
type rawRow [18]any

func scanRaw(sc scanner) (*rawRow, error) {
	var r rawRow
	dest := make([]any, len(r))
	for i := range r {
		dest[i] = &r[i]
	}
	if err := sc.Scan(dest...); err != nil {
		return nil, err
	}
	for i, v := range r {
		if b, ok := v.([]byte); ok { // the driver may reuse its buffer
			r[i] = append([]byte(nil), b...)
		}
	}
	return &r, nil
}

// scanMessage reads one row of messageColumns. A value it cannot decode is
// a *store.ColumnError naming the column and the value.
func scanMessage(sc scanner) (*outbox.Message, error) {
	r, err := scanRaw(sc)
	if err != nil {
		return nil, err
	}
	return r.decode()
}

// decode turns the row into a message, or a *store.ColumnError for the
// first column it cannot read.
func (r *rawRow) decode() (*outbox.Message, error) {
	m, err := r.decodeAll()
	if err != nil {
		return nil, err
	}
	return m, nil
}

// scanShown reads one row of messageColumns for an operator's view: a
// value it cannot read is left zero and named in Error
// (store.ShowUndecodable).
func scanShown(sc scanner) (*outbox.Message, error) {
	r, err := scanRaw(sc)
	if err != nil {
		return nil, err
	}
	m, err := r.decodeAll()
	if err != nil {
		store.ShowUndecodable(m, err)
	}
	return m, nil
}

// decodeAll turns the row into a message whatever its values: each one it
// cannot read is left zero, and the first is returned as a
// *store.ColumnError beside the message.
func (r *rawRow) decodeAll() (*outbox.Message, error) {
	var (
		m   outbox.Message
		d   decoder
		id  = d.text(r, 1, true)
		err error
	)
	m.Seq = d.integer(r, 0, true, math.MinInt64, math.MaxInt64)
	m.Destination = d.strictText(r, 2, true)
	m.Stream = d.strictText(r, 3, false)
	m.Type = d.strictText(r, 4, true)
	m.Payload = d.bytes(r, 5)
	m.Headers = d.headers(r, 6)
	m.Ordering = outbox.Ordering(d.text(r, 7, false))
	m.Status = outbox.Status(d.integer(r, 8, true, 0, store.MaxStatus))
	m.Attempts = int(d.integer(r, 9, true, 0, math.MaxInt32))
	m.FailureReason = errorhandling.FailureReason(d.integer(r, 10, false, math.MinInt32, math.MaxInt32))
	m.Error, m.Fingerprint = d.text(r, 11, false), d.text(r, 12, false)
	m.ScheduledFor = d.millis(r, 13, false)
	m.InstanceID = d.text(r, 14, false)
	m.LeaseExpiry = d.millis(r, 15, false)
	m.CreatedAt = d.millis(r, 16, true)
	m.DeadLetteredAt = d.millis(r, 17, false)
	if m.ID, err = uuid.Parse(id); err != nil && d.err == nil {
		d.err = &store.ColumnError{Column: "id", Value: r[1], Problem: "is not a UUID"}
	}
	if err := m.Ordering.Validate(); err != nil {
		m.Ordering = ""
		if d.err == nil {
			d.err = &store.ColumnError{Column: "ordering", Value: r[7], Problem: "is not strict, release or none"}
		}
	}
	return &m, d.err
}

// decoder reads columns of a rawRow, keeping the first error.
type decoder struct{ err error }

func (d *decoder) fail(r *rawRow, i int, problem string) {
	if d.err == nil {
		d.err = &store.ColumnError{Column: columnNames[i], Value: r[i], Problem: problem}
	}
}

// text reads a TEXT column; required means neither NULL nor empty.
func (d *decoder) text(r *rawRow, i int, required bool) string {
	var s string
	switch v := r[i].(type) {
	case nil:
		if required {
			d.fail(r, i, "is NULL")
		}
		return ""
	case string:
		s = v
	case []byte:
		s = string(v)
	case int64:
		s = strconv.FormatInt(v, 10)
	case float64:
		s = strconv.FormatFloat(v, 'g', -1, 64)
	default:
		d.fail(r, i, fmt.Sprintf("has the unexpected type %T", v))
		return ""
	}
	if required && s == "" {
		d.fail(r, i, "is empty")
	}
	return s
}

// strictText reads a column that must hold text (the triggers of
// migration 0003 and its outbox_undecodable index say the same).
func (d *decoder) strictText(r *rawRow, i int, required bool) string {
	switch r[i].(type) {
	case string:
		return d.text(r, i, required)
	case nil:
		d.fail(r, i, "is NULL")
	default:
		d.fail(r, i, fmt.Sprintf("is a %s, not text", storageClass(r[i])))
	}
	return ""
}

// storageClass names the SQLite storage class of a value read back.
func storageClass(v any) string {
	switch v.(type) {
	case int64:
		return "INTEGER"
	case float64:
		return "REAL"
	case []byte:
		return "BLOB"
	case nil:
		return "NULL"
	}
	return "TEXT"
}

// integer reads an INTEGER column within [lo, hi]; NULL is 0 unless
// required.
func (d *decoder) integer(r *rawRow, i int, required bool, lo, hi int64) int64 {
	var n int64
	switch v := r[i].(type) {
	case nil:
		if required {
			d.fail(r, i, "is NULL")
		}
		return 0
	case int64:
		n = v
	case float64:
		if v != math.Trunc(v) || v < -(1<<63) || v >= 1<<63 {
			d.fail(r, i, "is not an integer")
			return 0
		}
		n = int64(v)
	default:
		d.fail(r, i, "is not an integer")
		return 0
	}
	if n < lo || n > hi {
		d.fail(r, i, fmt.Sprintf("is out of range [%d, %d]", lo, hi))
		return 0
	}
	return n
}

// The times a stored unix-millisecond value may stand for: years 1 to
// 9999, so that every time formats and compares sanely.
const (
	minMillis = -62135596800000
	maxMillis = 253402300799999
)

// millis reads a unix-millisecond column; NULL is the zero time unless
// required.
func (d *decoder) millis(r *rawRow, i int, required bool) time.Time {
	if _, isText := r[i].(string); isText {
		d.fail(r, i, "is text, not unix milliseconds")
		return time.Time{}
	}
	if r[i] == nil {
		if required {
			d.fail(r, i, "is NULL")
		}
		return time.Time{}
	}
	n := d.integer(r, i, required, minMillis, maxMillis)
	if d.err != nil {
		return time.Time{}
	}
	return time.UnixMilli(n).UTC()
}

// bytes reads the payload: a BLOB, or text or a number stored there.
func (d *decoder) bytes(r *rawRow, i int) []byte {
	switch v := r[i].(type) {
	case nil:
		return nil
	case []byte:
		return v
	case string:
		return []byte(v)
	case int64, float64:
		return []byte(fmt.Sprint(v))
	}
	d.fail(r, i, fmt.Sprintf("has the unexpected type %T", r[i]))
	return nil
}

// headers reads the headers column: a JSON object. Values that are not
// strings are kept in their JSON spelling.
func (d *decoder) headers(r *rawRow, i int) map[string]string {
	var raw []byte
	switch v := r[i].(type) {
	case nil:
		return nil
	case string:
		raw = []byte(v)
	case []byte:
		raw = v
	default:
		d.fail(r, i, "is not a JSON object")
		return nil
	}
	h, err := store.DecodeHeaders(raw)
	if err != nil {
		d.fail(r, i, err.Error())
	}
	return h
}

// scanMessages reads every row for an operator's view (scanShown) and
// closes rows.
func scanMessages(rows *sql.Rows) ([]*outbox.Message, error) {
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

// badRow is a claimed row that could not be decoded.
type badRow struct {
	raw *rawRow
	err error
}

// scanClaimed reads every claimed row and closes rows: the rows it decodes
// and, apart, those it cannot (each to be quarantined).
func scanClaimed(rows *sql.Rows) ([]*outbox.Message, []badRow, error) {
	defer rows.Close()
	var (
		out []*outbox.Message
		bad []badRow
	)
	for rows.Next() {
		var payloadLen, headersLen sql.NullInt64
		r, err := scanRaw(withLeading{sc: rows, extra: []any{&payloadLen, &headersLen}})
		if err != nil {
			return nil, nil, err
		}
		err = store.CheckClaimedSize(payloadLen.Int64, headersLen.Int64)
		var m *outbox.Message
		if err == nil {
			m, err = r.decode()
		}
		if err != nil {
			bad = append(bad, badRow{raw: r, err: err})
			continue
		}
		out = append(out, m)
	}
	return out, bad, rows.Err()
}

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
