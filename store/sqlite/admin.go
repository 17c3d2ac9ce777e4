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

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

var _ store.Admin = (*Store)(nil)

// EnqueueIdempotent writes msgs unless key was used before; see
// store.Admin.
func (s *Store) EnqueueIdempotent(ctx context.Context, key string, msgs ...*outbox.Message) ([]uuid.UUID, bool, error) {
	var ids []uuid.UUID
	var created bool
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		ids, created, err = s.EnqueueIdempotentTx(ctx, tx, key, msgs...)
		return err
	})
	if err == nil && created {
		s.hub.Notify()
	}
	return ids, created, err
}

// EnqueueIdempotentTx is EnqueueTx under an idempotency key, inside the
// caller's transaction: the first call with a key writes msgs and records
// the key; a later one writes nothing and returns the first call's ids with
// created false. A duplicate is not an error, so it never aborts the
// caller's transaction.
func (s *Store) EnqueueIdempotentTx(ctx context.Context, tx *sql.Tx, key string, msgs ...*outbox.Message) ([]uuid.UUID, bool, error) {
	if err := store.CheckIdempotencyKey(key); err != nil {
		return nil, false, fmt.Errorf("sqlite: %w", err)
	}
	ids := make([]uuid.UUID, len(msgs))
	for i, m := range msgs {
		if err := m.Prepare(); err != nil {
			return nil, false, err
		}
		ids[i] = m.ID
	}
	enc, _ := json.Marshal(ids)
	res, err := tx.ExecContext(ctx, s.sql(`INSERT INTO {{prefix}}idempotency_keys (key, message_ids, created_at)
		VALUES (?, ?, ?) ON CONFLICT (key) DO NOTHING`), key, string(enc), s.now().UnixMilli())
	if err != nil {
		return nil, false, wrap("enqueue", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		var stored string
		if err := tx.QueryRowContext(ctx, s.sql(`SELECT message_ids FROM {{prefix}}idempotency_keys WHERE key = ?`), key).Scan(&stored); err != nil {
			return nil, false, wrap("enqueue", err)
		}
		var first []uuid.UUID
		if err := json.Unmarshal([]byte(stored), &first); err != nil {
			return nil, false, wrap("enqueue", fmt.Errorf("idempotency key %q: stored ids: %w", key, err))
		}
		return first, false, nil
	}
	if err := s.EnqueueTx(ctx, tx, msgs...); err != nil {
		return nil, false, err
	}
	return ids, true, nil
}

// messageStates are the SQL conditions of the store.MessageState values;
// ? is when a lease has lapsed (lapseAt), in unix milliseconds.
var messageStates = map[store.MessageState]string{
	store.StateReady:    `(status & 4) = 0 AND dead_lettered_at IS NULL AND (status & 32768) = 0 AND (instance_id IS NULL OR lease_expiry <= ?)`,
	store.StateRetrying: `(status & 4) = 0 AND dead_lettered_at IS NULL AND (status & 32768) <> 0 AND (instance_id IS NULL OR lease_expiry <= ?)`,
	// through outbox_lease: the leased rows are few, and an index of them
	// by seq would cost every claim an entry
	store.StateLeased:       `seq IN (SELECT seq FROM {{prefix}}outbox WHERE instance_id IS NOT NULL AND lease_expiry > ? AND (status & 4) = 0)`,
	store.StateDeadLettered: `dead_lettered_at IS NOT NULL AND ? IS NOT NULL`,
	store.StateDelivered:    `(status & 4) <> 0 AND ? IS NOT NULL`,
}

// ListMessages lists messages in seq order; see store.Admin.
func (s *Store) ListMessages(ctx context.Context, f store.MessageFilter) ([]*outbox.Message, error) {
	now := s.now()
	lapse := now.UnixMilli()
	if f.State != "" { // only a state reads the leases
		var err error
		if lapse, err = s.lapseAt(ctx, s.r, now); err != nil {
			return nil, wrap("list messages", err)
		}
	}
	q, args, err := s.listMessagesSQL(f, lapse)
	if err != nil {
		return nil, err
	}
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, wrap("list messages", err)
	}
	msgs, err := scanMessages(rows)
	return msgs, wrap("list messages", err)
}

// listMessagesSQL is ListMessages' statement and its arguments; lapse is
// when a lease has lapsed (lapseAt).
func (s *Store) listMessagesSQL(f store.MessageFilter, lapse int64) (string, []any, error) {
	where := []string{"seq > ?"}
	args := []any{f.AfterSeq}
	for _, c := range []struct{ col, v string }{{"destination", f.Destination}, {"stream", f.Stream}, {"type", f.Type}} {
		if c.v != "" {
			where = append(where, c.col+" = ?")
			args = append(args, c.v)
		}
	}
	if f.State != "" {
		cond, ok := messageStates[f.State]
		if !ok {
			return "", nil, fmt.Errorf("sqlite: unknown message state %q", f.State)
		}
		where = append(where, cond)
		args = append(args, lapse)
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	args = append(args, limit)
	cols := messageColumns
	if f.OmitPayload {
		cols = withoutPayload(cols)
	}
	return s.sql(`SELECT ` + cols + ` FROM {{prefix}}outbox WHERE ` +
		strings.Join(where, " AND ") + ` ORDER BY seq LIMIT ?`), args, nil
}

// Now is this host's time (Config.Clock's when set); see store.Admin.
func (s *Store) Now(context.Context) (time.Time, error) { return s.now(), nil }

// Cancel deletes an undelivered message no relay holds; see store.Admin.
func (s *Store) Cancel(ctx context.Context, id uuid.UUID) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		lapse, err := s.lapseAt(ctx, tx, s.now())
		if err != nil {
			return wrap("cancel", err)
		}
		var leased, dead bool
		err = tx.QueryRowContext(ctx, s.sql(`SELECT instance_id IS NOT NULL AND lease_expiry > ?, dead_lettered_at IS NOT NULL
			FROM {{prefix}}outbox WHERE id = ? AND (status & 4) = 0`), lapse, id.String()).Scan(&leased, &dead)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("%w: %s", store.ErrNotFound, id)
		case err != nil:
			return wrap("cancel", err)
		case dead:
			return fmt.Errorf("%w: %s", store.ErrDeadLettered, id)
		case leased:
			return fmt.Errorf("%w: %s", store.ErrLeased, id)
		}
		_, err = tx.ExecContext(ctx, s.sql(`DELETE FROM {{prefix}}outbox WHERE id = ?`), id.String())
		return wrap("cancel", err)
	})
}

// Audit records an operator's action; see store.Admin.
func (s *Store) Audit(ctx context.Context, r *store.AuditRecord) error {
	store.CleanAudit(r)
	r.At = s.now().Truncate(1e6)
	return s.write(ctx, func(tx *sql.Tx) error {
		return wrap("audit", tx.QueryRowContext(ctx, s.sql(`INSERT INTO {{prefix}}audit (at, actor, action, target, filter, count, notes)
			VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id`), r.At.UnixMilli(), r.Actor, r.Action, r.Target, r.Filter, r.Count, r.Notes).Scan(&r.ID))
	})
}

// AuditLog lists audit records, newest first; see store.Admin.
func (s *Store) AuditLog(ctx context.Context, f store.AuditFilter) ([]*store.AuditRecord, error) {
	where, args := []string{"1 = 1"}, []any{}
	if f.Target != "" {
		where, args = append(where, "target = ?"), append(args, f.Target)
	}
	if f.Action != "" {
		where, args = append(where, "action = ?"), append(args, f.Action)
	}
	if f.BeforeID > 0 {
		where, args = append(where, "id < ?"), append(args, f.BeforeID)
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	rows, err := s.r.QueryContext(ctx, s.sql(`SELECT id, at, actor, action, target, filter, count, notes FROM {{prefix}}audit
		WHERE `+strings.Join(where, " AND ")+` ORDER BY id DESC LIMIT ?`), append(args, limit)...)
	if err != nil {
		return nil, wrap("audit log", err)
	}
	defer rows.Close()
	out := []*store.AuditRecord{}
	for rows.Next() {
		var r store.AuditRecord
		var at int64
		if err := rows.Scan(&r.ID, &at, &r.Actor, &r.Action, &r.Target, &r.Filter, &r.Count, &r.Notes); err != nil {
			return nil, wrap("audit log", err)
		}
		r.At = fromMillis(sql.NullInt64{Int64: at, Valid: true})
		out = append(out, &r)
	}
	return out, wrap("audit log", rows.Err())
}
