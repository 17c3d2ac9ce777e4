package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// deadLetters is the dlq.Operator on the <prefix>dead_letters table.
type deadLetters struct{ s *Store }

var _ dlq.Operator = (*deadLetters)(nil)

// DLQ returns the store's persistent dead-letter queue. Entries of outbox
// messages are written by ProcessBatch and DeadLetter; Add parks others
// (workflow tasks).
func (s *Store) DLQ() dlq.Operator { return s.dlq }

// dlCols are the dead_letters columns scanEntry reads, in its order.
const dlCols = `id, task_instance_id, task_id, dag_run_id, dag_id, message_id, destination,
	stream, type, payload, headers, seq, failure_reason, reason, failure_time,
	first_failure_time, attempts, last_attempt_time, error_message, fingerprint,
	metadata, status, resolution_notes, resolved_by, resolved_at, replayed, replayed_by,
	replay_notes, replayed_at`

// scanEntry reads one row of dlCols. Values written with plain SQL that
// the store cannot use (metadata or headers that are not a JSON object, an
// infinite time, a year PostgreSQL keeps but JSON cannot show) are left
// zero and named in the entry's Metadata (store.ShowUndecodableEntry), so
// that one such row does not fail a whole list or bulk action.
func scanEntry(row pgx.Row) (*dlq.Entry, error) {
	var (
		e                                    dlq.Entry
		headers, meta                        []byte
		reason                               int32
		status                               string
		failure, first, last, resolved, reps pgtype.Timestamptz
	)
	err := row.Scan(&e.ID, &e.TaskInstanceID, &e.TaskID, &e.DAGRunID, &e.DAGID, &e.MessageID,
		&e.Destination, &e.Stream, &e.Type, &e.Payload, &headers, &e.Seq, &e.FailureReason,
		&reason, &failure, &first, &e.Attempts, &last, &e.ErrorMessage, &e.Fingerprint,
		&meta, &status, &e.ResolutionNotes, &e.ResolvedBy, &resolved, &e.Replayed, &e.ReplayedBy,
		&e.ReplayNotes, &reps)
	if err != nil {
		return nil, err
	}
	var bad []error
	e.Reason = errorhandling.FailureReason(reason)
	e.Status = dlq.Status(status)
	if e.Headers, err = store.DecodeHeaders(headers); err != nil {
		bad = append(bad, &store.ColumnError{Column: "headers", Value: string(headers), Problem: err.Error()})
	}
	if len(meta) > 0 && string(meta) != "{}" {
		if err := json.Unmarshal(meta, &e.Metadata); err != nil || e.Metadata == nil {
			e.Metadata = nil
			bad = append(bad, &store.ColumnError{Column: "metadata", Value: string(meta), Problem: "is not a JSON object"})
		}
	}
	when := func(col string, t pgtype.Timestamptz) *time.Time {
		switch {
		case !t.Valid:
		case t.InfinityModifier == pgtype.Infinity:
			bad = append(bad, &store.ColumnError{Column: col, Value: "infinity", Problem: "is not a finite time"})
		case t.InfinityModifier == pgtype.NegativeInfinity:
			bad = append(bad, &store.ColumnError{Column: col, Value: "-infinity", Problem: "is not a finite time"})
		case t.Time.Before(outbox.MinTime) || t.Time.After(outbox.MaxTime):
			bad = append(bad, &store.ColumnError{Column: col, Value: t.Time.UTC().Format(time.RFC3339Nano),
				Problem: "is outside the years 1 to 9999"})
		default:
			u := t.Time.UTC()
			return &u
		}
		return nil
	}
	if t := when("failure_time", failure); t != nil {
		e.FailureTime = *t
	}
	e.FirstFailureTime, e.LastAttemptTime = derefTime(when("first_failure_time", first)), derefTime(when("last_attempt_time", last))
	e.ResolvedAt, e.ReplayedAt = when("resolved_at", resolved), when("replayed_at", reps)
	store.ShowUndecodableEntry(&e, bad)
	return &e, nil
}

func collectEntries(rows pgx.Rows) ([]*dlq.Entry, error) {
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

// Add parks an entry. An empty ID is assigned (a UUIDv7), Status defaults
// to pending, FailureTime to now, Reason to the one FailureReason names
// (else Unknown) and FailureReason to Reason's name; every text is cleaned
// (dlq.Entry.Clean), since PostgreSQL refuses NUL and invalid UTF-8.
func (q *deadLetters) Add(ctx context.Context, e *dlq.Entry) error {
	if e == nil {
		return errors.New("postgres: nil dead-letter entry")
	}
	if e.ID == "" {
		e.ID = newEntryID()
	}
	if e.Status == "" {
		e.Status = dlq.StatusPending
	}
	if !e.Status.Valid() {
		return fmt.Errorf("postgres: dlq add: unknown status %q", e.Status)
	}
	e.Clean()
	if e.Reason == 0 {
		e.Reason = errorhandling.ReasonUnknown
		if r, err := errorhandling.ParseFailureReason(e.FailureReason); err == nil {
			e.Reason = r
		}
	}
	if e.FailureReason == "" {
		e.FailureReason = e.Reason.String()
	}
	if e.FailureTime.IsZero() {
		if now := q.s.now(); now != nil {
			e.FailureTime = *now
		} else if err := q.s.pool.QueryRow(ctx, `SELECT now()`).Scan(&e.FailureTime); err != nil {
			return dlqErr("add", err)
		}
		e.FailureTime = e.FailureTime.UTC()
	}
	headers, err := encodeHeaders(e.Headers)
	if err != nil {
		return err
	}
	meta := []byte("{}")
	if len(e.Metadata) > 0 {
		if meta, err = json.Marshal(e.Metadata); err != nil {
			return fmt.Errorf("postgres: dlq add: encode metadata: %w", err)
		}
	}
	payload := e.Payload
	if payload == nil {
		payload = []byte{}
	}
	tag, err := q.s.pool.Exec(ctx, `INSERT INTO `+q.s.n.deadLetters+` (`+dlCols+`) VALUES
		($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::jsonb, $12, $13, $14, $15, $16, $17, $18,
		 $19, $20, $21::jsonb, $22, $23, $24, $25, $26, $27, $28, $29)
		ON CONFLICT (id) DO NOTHING`,
		e.ID, e.TaskInstanceID, e.TaskID, e.DAGRunID, e.DAGID, e.MessageID, e.Destination,
		e.Stream, e.Type, payload, headers, e.Seq, e.FailureReason, int32(e.Reason), e.FailureTime,
		nullTime(e.FirstFailureTime), e.Attempts, nullTime(e.LastAttemptTime),
		e.ErrorMessage, e.Fingerprint, string(meta), string(e.Status), e.ResolutionNotes, e.ResolvedBy,
		e.ResolvedAt, e.Replayed, e.ReplayedBy, e.ReplayNotes, e.ReplayedAt)
	if err != nil {
		return dlqErr("add", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("postgres: dlq add: entry %q: %w", e.ID, dlq.ErrExists)
	}
	return nil
}

// dlqErr is the error of the dead-letter operation op that failed with
// err, matching store.ErrUnavailable too when the database was out of
// reach (Unavailable), so that a caller tells an outage, after which the
// call may be made again, from a refusal. The workflow engine retries its
// dead-letter adds so while it holds the run.
func dlqErr(op string, err error) error {
	if Unavailable(err) {
		return fmt.Errorf("postgres: dlq %s: %w: %w", op, store.ErrUnavailable, err)
	}
	return fmt.Errorf("postgres: dlq %s: %w", op, err)
}

// entryIDOK reports whether id could name an entry: PostgreSQL refuses
// text with a NUL or invalid UTF-8 (an error, not "no such entry"), and
// cleaning it would name another entry.
func entryIDOK(id string) bool {
	return utf8.ValidString(id) && strings.IndexByte(id, 0) < 0
}

// Get returns the entry with the id, or an error matching dlq.ErrNotFound.
func (q *deadLetters) Get(ctx context.Context, id string) (*dlq.Entry, error) {
	if !entryIDOK(id) {
		return nil, fmt.Errorf("%w: %q", dlq.ErrNotFound, id)
	}
	e, err := scanEntry(q.s.pool.QueryRow(ctx, `SELECT `+dlCols+` FROM `+q.s.n.deadLetters+` WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: %s", dlq.ErrNotFound, id)
	}
	if err != nil {
		return nil, dlqErr("get", err)
	}
	return e, nil
}

// List returns the entries matching f (nil matches all) ordered by
// FailureTime then ID, after f.Cursor when set (an unknown cursor is
// dlq.ErrNotFound), at most f.Limit when set.
func (q *deadLetters) List(ctx context.Context, f *dlq.Filters) ([]*dlq.Entry, error) {
	return q.list(ctx, q.s.pool, f, false, false)
}

// cursorOf is f.Cursor, "" for a nil f.
func cursorOf(f *dlq.Filters) string {
	if f == nil {
		return ""
	}
	return f.Cursor
}

// querier is what list and enqueue need of a pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// list runs List; forReplay keeps only the pending, not yet replayed
// entries, and lock locks them.
func (q *deadLetters) list(ctx context.Context, db querier, f *dlq.Filters, forReplay, lock bool) ([]*dlq.Entry, error) {
	where, args := filterSQL(f)
	if forReplay {
		// what ReplayAs would refuse: replayed, resolved, or with its
		// message still being delivered (dlq.ErrInFlight)
		args = append(args, q.s.now())
		where = append(where, `status = 'pending'`, `NOT replayed`,
			`NOT EXISTS (SELECT 1 FROM `+q.s.n.outbox+` o WHERE o.id = `+msgIDOf("message_id")+` AND `+
				q.s.inFlight(fmt.Sprintf("$%d", len(args)))+`)`)
	}
	if at, id, ok := dlq.ParseCursor(cursorOf(f)); ok {
		args = append(args, at, id)
		where = append(where, fmt.Sprintf(`(failure_time, id) > ($%d, $%d)`, len(args)-1, len(args)))
	} else if f != nil && f.Cursor != "" {
		args = append(args, f.Cursor)
		c := fmt.Sprintf("$%d", len(args))
		rows, err := db.Query(ctx, `SELECT 1 FROM `+q.s.n.deadLetters+` WHERE id = $1`, f.Cursor)
		if err != nil {
			return nil, dlqErr("list", err)
		}
		found := rows.Next()
		rows.Close()
		if !found {
			return nil, fmt.Errorf("%w: cursor %s", dlq.ErrNotFound, f.Cursor)
		}
		where = append(where, `(failure_time, id) > (SELECT failure_time, id FROM `+q.s.n.deadLetters+` WHERE id = `+c+`)`)
	}
	rows, err := db.Query(ctx, q.listSQL(where, f, lock), args...)
	if err != nil {
		return nil, dlqErr("list", err)
	}
	out, err := collectEntries(rows)
	if err != nil {
		return nil, dlqErr("list", err)
	}
	return out, nil
}

// listSQL is the statement of a page of entries matching where.
func (q *deadLetters) listSQL(where []string, f *dlq.Filters, lock bool) string {
	cols := dlCols
	if f != nil && f.OmitPayload {
		cols = withoutPayload(cols)
	}
	sql := `SELECT ` + cols + ` FROM ` + q.s.n.deadLetters
	if len(where) > 0 {
		sql += ` WHERE ` + strings.Join(where, ` AND `)
	}
	sql += ` ORDER BY failure_time, id`
	if f != nil && f.Limit > 0 {
		sql += fmt.Sprintf(` LIMIT %d`, f.Limit)
	}
	if lock {
		sql += ` FOR UPDATE`
	}
	return sql
}

// filterSQL turns the set fields of f into AND-ed conditions.
func filterSQL(f *dlq.Filters) ([]string, []any) {
	if f == nil {
		return nil, nil
	}
	var (
		where []string
		args  []any
	)
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, fmt.Sprintf("$%d", len(args))))
	}
	for _, c := range []struct {
		col, v string
	}{{"dag_id", f.DAGID}, {"task_id", f.TaskID}, {"destination", f.Destination},
		{"stream", f.Stream}, {"fingerprint", f.Fingerprint}, {"status", string(f.Status)}} {
		if c.v != "" {
			add(c.col+" = %s", c.v)
		}
	}
	if f.MessageID != "" {
		// The second term lets a generic plan use the partial index
		// dead_letters_message_idx.
		add("message_id = %s AND message_id <> ''", f.MessageID)
	}
	if f.Reason != nil {
		add("reason = %s", int32(*f.Reason))
	}
	if f.After != nil {
		add("failure_time >= %s", *f.After)
	}
	if f.Before != nil {
		add("failure_time < %s", *f.Before)
	}
	if f.Replayed != nil {
		add("replayed = %s", *f.Replayed)
	}
	return where, args
}

// Count returns the number of pending entries.
func (q *deadLetters) Count(ctx context.Context) (int, error) {
	var n int
	if err := q.s.pool.QueryRow(ctx, `SELECT count(*) FROM `+q.s.n.deadLetters+` WHERE status = 'pending'`).Scan(&n); err != nil {
		return 0, fmt.Errorf("postgres: dlq count: %w", err)
	}
	return n, nil
}

// Resolve marks the entry resolved with the operator's notes.
func (q *deadLetters) Resolve(ctx context.Context, id, notes string) error {
	return q.ResolveAs(ctx, id, dlq.Action{Notes: notes})
}

// validEntryIDs keeps the ids that can name an entry (entryIDOK).
func validEntryIDs(ids []string) []string {
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if entryIDOK(id) {
			out = append(out, id)
		}
	}
	return out
}

// ResolveEntriesAs resolves those of ids whose status is still from, in
// one statement; see dlq.Operator.
func (q *deadLetters) ResolveEntriesAs(ctx context.Context, ids []string, from dlq.Status, a dlq.Action) ([]string, error) {
	ids = validEntryIDs(ids)
	if len(ids) == 0 {
		return []string{}, nil
	}
	a = a.Cleaned()
	rows, err := q.s.pool.Query(ctx, `UPDATE `+q.s.n.deadLetters+`
		SET status = 'resolved', resolution_notes = $3, resolved_by = $4, resolved_at = `+nowExpr+`
		WHERE id = ANY($2::text[]) AND status = $5 RETURNING id`,
		q.s.now(), ids, a.Notes, a.Actor, string(from))
	if err != nil {
		return nil, fmt.Errorf("postgres: dlq resolve: %w", err)
	}
	done, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("postgres: dlq resolve: %w", err)
	}
	return done, nil
}

// ResolveAs marks the entry resolved by a.Actor with a.Notes.
func (q *deadLetters) ResolveAs(ctx context.Context, id string, a dlq.Action) error {
	if !entryIDOK(id) {
		return fmt.Errorf("%w: %q", dlq.ErrNotFound, id)
	}
	a = a.Cleaned()
	tag, err := q.s.pool.Exec(ctx, `UPDATE `+q.s.n.deadLetters+`
		SET status = 'resolved', resolution_notes = $3, resolved_by = $4, resolved_at = `+nowExpr+` WHERE id = $2`,
		q.s.now(), id, a.Notes, a.Actor)
	if err != nil {
		return dlqErr("resolve", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: %s", dlq.ErrNotFound, id)
	}
	return nil
}
