package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/store"
)

// querier is a *sql.DB or a *sql.Tx.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

const entryColumns = `id, task_instance_id, task_id, dag_run_id, dag_id, message_id, destination, stream, type,
	payload, headers, seq, failure_reason, reason, failure_time, first_failure_time, attempts, last_attempt_time,
	error_message, fingerprint, metadata, status, resolution_notes, resolved_by, resolved_at, replayed, replayed_by,
	replay_notes, replayed_at`

// insertEntry writes e, first filling its defaults: an ID (UUIDv7), status
// pending, FailureTime now, the reason's number and name from each other
// (ReasonUnknown when neither is set), every text cleaned (dlq.Entry.Clean).
func (s *Store) insertEntry(ctx context.Context, tx *sql.Tx, e *dlq.Entry, now time.Time) error {
	if e.ID == "" {
		id, err := uuid.NewV7()
		if err != nil {
			return err
		}
		e.ID = id.String()
	}
	if e.Status == "" {
		e.Status = dlq.StatusPending
	}
	if !e.Status.Valid() {
		return fmt.Errorf("dlq entry %s: unknown status %q", e.ID, e.Status)
	}
	if e.FailureTime.IsZero() {
		e.FailureTime = now
	}
	if e.Reason == 0 && e.FailureReason != "" {
		e.Reason, _ = errorhandling.ParseFailureReason(e.FailureReason)
	}
	if e.Reason == 0 {
		e.Reason = errorhandling.ReasonUnknown
	}
	if e.FailureReason == "" {
		e.FailureReason = e.Reason.String()
	}
	e.Clean()
	headers, err := encodeHeaders(e.Headers)
	if err != nil {
		return err
	}
	meta := "{}"
	if len(e.Metadata) > 0 {
		b, err := json.Marshal(e.Metadata)
		if err != nil {
			return fmt.Errorf("metadata: %w", err)
		}
		meta = string(b)
	}
	res, err := tx.ExecContext(ctx, s.sql(`INSERT INTO {{prefix}}dead_letters (`+entryColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO NOTHING`),
		e.ID, e.TaskInstanceID, e.TaskID, e.DAGRunID, e.DAGID, e.MessageID, e.Destination, e.Stream, e.Type,
		blob(e.Payload), headers, e.Seq, e.FailureReason, int(e.Reason), e.FailureTime.UnixMilli(),
		nullMillis(e.FirstFailureTime), e.Attempts, nullMillis(e.LastAttemptTime), e.ErrorMessage, e.Fingerprint,
		meta, string(e.Status), e.ResolutionNotes, e.ResolvedBy, timePtrMillis(e.ResolvedAt), e.Replayed, e.ReplayedBy,
		e.ReplayNotes, timePtrMillis(e.ReplayedAt))
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		return fmt.Errorf("dlq entry %q: %w", e.ID, dlq.ErrExists)
	}
	return nil
}

// entryColumnNames are entryColumns one by one.
var entryColumnNames = strings.Fields(strings.ReplaceAll(entryColumns, ",", " "))

// scanEntry reads one row of entryColumns whatever SQLite stored in it:
// a value written with plain SQL that the store cannot use (text where a
// number or a time belongs, a time outside the years 1 to 9999, metadata
// or headers that are not a JSON object, a NULL id) is left zero and
// named in the entry's Metadata (store.ShowUndecodableEntry), so that one
// such row does not fail a whole list or bulk action. A replayed flag
// that is not 0 or 1 reads as replayed: a replay then refuses the entry
// rather than send its message again.
func scanEntry(sc scanner) (*dlq.Entry, error) {
	raw := make([]any, len(entryColumnNames))
	dest := make([]any, len(raw))
	for i := range raw {
		dest[i] = &raw[i]
	}
	if err := sc.Scan(dest...); err != nil {
		return nil, err
	}
	var bad []error
	fail := func(i int, problem string) {
		bad = append(bad, &store.ColumnError{Column: entryColumnNames[i], Value: raw[i], Problem: problem})
	}
	text := func(i int) string {
		switch v := raw[i].(type) {
		case nil:
			if i == 0 {
				fail(i, "is NULL")
			}
		case string:
			return v
		case []byte:
			return string(v)
		case int64:
			return strconv.FormatInt(v, 10)
		case float64:
			return strconv.FormatFloat(v, 'g', -1, 64)
		}
		return ""
	}
	integer := func(i int, lo, hi int64) (int64, bool) {
		switch v := raw[i].(type) {
		case int64:
			if v >= lo && v <= hi {
				return v, true
			}
			fail(i, fmt.Sprintf("is out of range [%d, %d]", lo, hi))
		case float64:
			if v == math.Trunc(v) && v >= float64(lo) && v <= float64(hi) {
				return int64(v), true
			}
			fail(i, "is not an integer in range")
		case nil:
			return 0, false
		default:
			fail(i, "is not an integer")
		}
		return 0, false
	}
	millis := func(i int) *time.Time {
		if n, ok := integer(i, minMillis, maxMillis); ok {
			t := time.UnixMilli(n).UTC()
			return &t
		}
		return nil
	}
	var e dlq.Entry
	e.ID, e.TaskInstanceID, e.TaskID, e.DAGRunID, e.DAGID, e.MessageID = text(0), text(1), text(2), text(3), text(4), text(5)
	e.Destination, e.Stream, e.Type = text(6), text(7), text(8)
	switch v := raw[9].(type) {
	case []byte:
		e.Payload = append([]byte(nil), v...) // the driver may reuse its buffer
	case nil:
	default:
		e.Payload = []byte(text(9))
	}
	if h := text(10); h != "" {
		var err error
		if e.Headers, err = store.DecodeHeaders([]byte(h)); err != nil {
			fail(10, err.Error())
		}
	}
	e.Seq, _ = integer(11, math.MinInt64, math.MaxInt64)
	e.FailureReason = text(12)
	r, _ := integer(13, math.MinInt32, math.MaxInt32)
	e.Reason = errorhandling.FailureReason(r)
	if t := millis(14); t != nil {
		e.FailureTime = *t
	} else if raw[14] == nil {
		fail(14, "is NULL")
	}
	e.FirstFailureTime, e.LastAttemptTime = derefTime(millis(15)), derefTime(millis(17))
	a, _ := integer(16, math.MinInt32, math.MaxInt32)
	e.Attempts = int(a)
	e.ErrorMessage, e.Fingerprint = text(18), text(19)
	if meta := text(20); meta != "" && meta != "{}" {
		if err := json.Unmarshal([]byte(meta), &e.Metadata); err != nil || e.Metadata == nil {
			e.Metadata = nil
			fail(20, "is not a JSON object")
		}
	}
	e.Status = dlq.Status(text(21))
	e.ResolutionNotes, e.ResolvedBy = text(22), text(23)
	e.ResolvedAt = millis(24)
	switch v := raw[25].(type) {
	case int64:
		e.Replayed = v != 0
		if v != 0 && v != 1 {
			fail(25, "is not 0 or 1")
		}
	default:
		e.Replayed = true
		fail(25, "is not 0 or 1")
	}
	e.ReplayedBy, e.ReplayNotes = text(26), text(27)
	e.ReplayedAt = millis(28)
	store.ShowUndecodableEntry(&e, bad)
	return &e, nil
}

func derefTime(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

func timePtrMillis(t *time.Time) any {
	if t == nil {
		return nil
	}
	return nullMillis(*t)
}

// replayableSQL are the conditions of an entry ReplayAs would replay: not
// replayed, not resolved, with an id (a NULL one, which SQLite lets plain
// SQL write, could never be marked replayed, and every bulk replay would
// send its message again), and its message not still being delivered
// (dlq.ErrInFlight); ? is when a lease has lapsed (lapseAt).
const replayableSQL = `status = 'pending' AND replayed = 0 AND id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM {{prefix}}outbox o
	WHERE o.id = lower(message_id) AND o.instance_id IS NOT NULL AND coalesce(o.lease_expiry, 0) > ?)`

// entryFilter turns f into a WHERE clause (with a leading "WHERE" when not
// empty) and its arguments, and the LIMIT to apply; replayable keeps the
// entries ReplayAs would replay (replayableSQL). A cursor must name an
// existing entry.
func (s *Store) entryFilter(ctx context.Context, q querier, f *dlq.Filters, replayable bool) (string, []any, error) {
	var (
		conds []string
		args  []any
	)
	if replayable {
		lapse, err := s.lapseAt(ctx, q, s.now())
		if err != nil {
			return "", nil, err
		}
		conds, args = append(conds, replayableSQL), append(args, lapse)
	}
	add := func(cond string, arg any) {
		conds = append(conds, cond)
		args = append(args, arg)
	}
	limit := ""
	if f != nil {
		for _, c := range []struct {
			col, val string
		}{{"dag_id", f.DAGID}, {"task_id", f.TaskID}, {"destination", f.Destination}, {"stream", f.Stream},
			{"fingerprint", f.Fingerprint}, {"status", string(f.Status)}} {
			if c.val != "" {
				add(c.col+" = ?", c.val)
			}
		}
		if f.MessageID != "" {
			// The second term lets SQLite use the partial index
			// dead_letters_message.
			add("message_id = ? AND message_id <> ''", f.MessageID)
		}
		if f.Reason != nil {
			add("reason = ?", int(*f.Reason))
		}
		if f.After != nil {
			add("failure_time >= ?", f.After.UnixMilli())
		}
		if f.Before != nil {
			add("failure_time < ?", f.Before.UnixMilli())
		}
		if f.Replayed != nil {
			add("replayed = ?", *f.Replayed)
		}
		if at, id, ok := dlq.ParseCursor(f.Cursor); ok {
			conds = append(conds, "(failure_time, id) > (?, ?)")
			args = append(args, at.UnixMilli(), id)
		} else if f.Cursor != "" {
			var at any // what the row holds, even text written with plain SQL
			err := q.QueryRowContext(ctx, s.sql(`SELECT failure_time FROM {{prefix}}dead_letters WHERE id = ?`), f.Cursor).Scan(&at)
			if errors.Is(err, sql.ErrNoRows) {
				return "", nil, fmt.Errorf("%w: cursor %q", dlq.ErrNotFound, f.Cursor)
			}
			if err != nil {
				return "", nil, err
			}
			conds = append(conds, "(failure_time, id) > (?, ?)")
			args = append(args, at, f.Cursor)
		}
	}
	where := ""
	if len(conds) > 0 {
		where = " WHERE " + strings.Join(conds, " AND ")
	}
	if f != nil && f.Limit > 0 {
		limit = " LIMIT ?"
		args = append(args, f.Limit)
	}
	return where + " ORDER BY failure_time, id" + limit, args, nil
}

// listEntryIDs returns the ids of the entries listEntries returns, in
// its order.
func (s *Store) listEntryIDs(ctx context.Context, q querier, f *dlq.Filters, replayable bool) ([]string, error) {
	tail, args, err := s.entryFilter(ctx, q, f, replayable)
	if err != nil {
		return nil, err
	}
	rows, err := q.QueryContext(ctx, s.sql(`SELECT id FROM {{prefix}}dead_letters`+tail), args...)
	if err != nil {
		return nil, err
	}
	return scanIDs(rows)
}

// listEntries returns the entries matching f; replayable keeps those
// ReplayAs would replay.
func (s *Store) listEntries(ctx context.Context, q querier, f *dlq.Filters, replayable bool) ([]*dlq.Entry, error) {
	tail, args, err := s.entryFilter(ctx, q, f, replayable)
	if err != nil {
		return nil, err
	}
	cols := entryColumns
	if f != nil && f.OmitPayload {
		cols = withoutPayload(cols)
	}
	rows, err := q.QueryContext(ctx, s.sql(`SELECT `+cols+` FROM {{prefix}}dead_letters`+tail), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*dlq.Entry
	for rows.Next() {
		e, err := scanEntry(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}
