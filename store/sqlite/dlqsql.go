package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
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
	_, err = tx.ExecContext(ctx, s.sql(`INSERT INTO {{prefix}}dead_letters (`+entryColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		e.ID, e.TaskInstanceID, e.TaskID, e.DAGRunID, e.DAGID, e.MessageID, e.Destination, e.Stream, e.Type,
		blob(e.Payload), headers, e.Seq, e.FailureReason, int(e.Reason), e.FailureTime.UnixMilli(),
		nullMillis(e.FirstFailureTime), e.Attempts, nullMillis(e.LastAttemptTime), e.ErrorMessage, e.Fingerprint,
		meta, string(e.Status), e.ResolutionNotes, e.ResolvedBy, timePtrMillis(e.ResolvedAt), e.Replayed, e.ReplayedBy,
		e.ReplayNotes, timePtrMillis(e.ReplayedAt))
	return err
}

func scanEntry(sc scanner) (*dlq.Entry, error) {
	var (
		e                                        dlq.Entry
		headers, meta, status                    string
		failure, first, last, resolved, replayed sql.NullInt64
		reason                                   int
	)
	if err := sc.Scan(&e.ID, &e.TaskInstanceID, &e.TaskID, &e.DAGRunID, &e.DAGID, &e.MessageID, &e.Destination,
		&e.Stream, &e.Type, &e.Payload, &headers, &e.Seq, &e.FailureReason, &reason, &failure, &first, &e.Attempts,
		&last, &e.ErrorMessage, &e.Fingerprint, &meta, &status, &e.ResolutionNotes, &e.ResolvedBy, &resolved,
		&e.Replayed, &e.ReplayedBy, &e.ReplayNotes, &replayed); err != nil {
		return nil, err
	}
	e.Headers, _ = store.DecodeHeaders([]byte(headers))
	if meta != "" && meta != "{}" {
		if err := json.Unmarshal([]byte(meta), &e.Metadata); err != nil {
			return nil, fmt.Errorf("entry %s: metadata: %w", e.ID, err)
		}
	}
	e.Reason = errorhandling.FailureReason(reason)
	e.Status = dlq.Status(status)
	e.FailureTime, e.FirstFailureTime, e.LastAttemptTime = fromMillis(failure), fromMillis(first), fromMillis(last)
	e.ResolvedAt, e.ReplayedAt = timePtr(resolved), timePtr(replayed)
	return &e, nil
}

func timePtr(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := fromMillis(v)
	return &t
}

func timePtrMillis(t *time.Time) any {
	if t == nil {
		return nil
	}
	return nullMillis(*t)
}

// replayableSQL are the conditions of an entry ReplayAs would replay: not
// replayed, not resolved, and its message not still being delivered
// (dlq.ErrInFlight); ? is now.
const replayableSQL = `status = 'pending' AND replayed = 0 AND NOT EXISTS (SELECT 1 FROM {{prefix}}outbox o
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
		conds, args = append(conds, replayableSQL), append(args, s.now().UnixMilli())
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
			var at int64
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
	rows, err := q.QueryContext(ctx, s.sql(`SELECT `+entryColumns+` FROM {{prefix}}dead_letters`+tail), args...)
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
