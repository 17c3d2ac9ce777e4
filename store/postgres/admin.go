package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

var _ store.Admin = (*Store)(nil)

// EnqueueIdempotent writes msgs unless key was used before; see
// store.Admin.
func (s *Store) EnqueueIdempotent(ctx context.Context, key string, msgs ...*outbox.Message) ([]uuid.UUID, bool, error) {
	var ids []uuid.UUID
	var created bool
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		ids, created, err = s.EnqueueIdempotentTx(ctx, tx, key, msgs...)
		return err
	})
	return ids, created, err
}

// EnqueueIdempotentTx is EnqueueTx under an idempotency key, inside the
// caller's transaction: the first call with a key writes msgs and records
// the key; a later one writes nothing and returns the first call's ids with
// created false. A duplicate is found with ON CONFLICT DO NOTHING, never a
// unique violation, so it does not abort the caller's transaction. Two
// transactions using one key at once: the second waits for the first and
// then sees its key.
func (s *Store) EnqueueIdempotentTx(ctx context.Context, tx pgx.Tx, key string, msgs ...*outbox.Message) ([]uuid.UUID, bool, error) {
	if err := store.CheckIdempotencyKey(key); err != nil {
		return nil, false, fmt.Errorf("postgres: %w", err)
	}
	if err := prepareAll(msgs, outbox.Limits{}); err != nil {
		return nil, false, err
	}
	ids := make([]uuid.UUID, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	tag, err := tx.Exec(ctx, `INSERT INTO `+s.n.qual+`idempotency_keys (key, message_ids, created_at)
		VALUES ($2, $3::uuid[], `+nowExpr+`) ON CONFLICT (key) DO NOTHING`, s.now(), key, pgUUIDs(ids))
	if err != nil {
		return nil, false, fmt.Errorf("postgres: enqueue: %w", err)
	}
	if tag.RowsAffected() == 0 {
		var first []uuid.UUID
		if err := tx.QueryRow(ctx, `SELECT message_ids FROM `+s.n.qual+`idempotency_keys WHERE key = $1`, key).Scan(&first); err != nil {
			return nil, false, fmt.Errorf("postgres: enqueue: %w", err)
		}
		return first, false, nil
	}
	if err := s.EnqueueTx(ctx, tx, msgs...); err != nil {
		return nil, false, err
	}
	return ids, true, nil
}

// messageStates are the SQL conditions of the store.MessageState values;
// {lapse} is when a lease has lapsed (lapseAt, of $1: the current time,
// NULL for the database's).
var messageStates = map[store.MessageState]string{
	store.StateReady:        `published_at IS NULL AND dead_lettered_at IS NULL AND status & 32768 = 0 AND (instance_id IS NULL OR lease_expiry <= {lapse})`,
	store.StateRetrying:     `published_at IS NULL AND dead_lettered_at IS NULL AND status & 32768 <> 0 AND (instance_id IS NULL OR lease_expiry <= {lapse})`,
	store.StateLeased:       `published_at IS NULL AND instance_id IS NOT NULL AND lease_expiry > {lapse}`,
	store.StateDeadLettered: `dead_lettered_at IS NOT NULL`,
	store.StateDelivered:    `published_at IS NOT NULL`,
}

// ListMessages lists messages in seq order; see store.Admin.
func (s *Store) ListMessages(ctx context.Context, f store.MessageFilter) ([]*outbox.Message, error) {
	if !storable(f.Destination, f.Stream, f.Type) {
		return []*outbox.Message{}, nil // no text column holds it
	}
	q, args, err := s.listMessagesSQL(f)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: list messages: %w", err)
	}
	msgs, err := collectMessages(rows)
	if err != nil {
		return nil, fmt.Errorf("postgres: list messages: %w", err)
	}
	return msgs, nil
}

// listMessagesSQL is ListMessages' statement and its arguments.
func (s *Store) listMessagesSQL(f store.MessageFilter) (string, []any, error) {
	args := []any{s.now(), f.AfterSeq}
	where := []string{"$1::timestamptz IS NULL OR true", "seq > $2"}
	for _, c := range []struct{ col, v string }{{"destination", f.Destination}, {"stream", f.Stream}, {"type", f.Type}} {
		if c.v != "" {
			args = append(args, c.v)
			where = append(where, fmt.Sprintf("%s = $%d", c.col, len(args)))
		}
	}
	if f.State != "" {
		cond, ok := messageStates[f.State]
		if !ok {
			return "", nil, fmt.Errorf("postgres: unknown message state %q", f.State)
		}
		where = append(where, strings.ReplaceAll(cond, "{lapse}", s.lapseAt("coalesce($1::timestamptz, now())")))
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	args = append(args, limit)
	cols := msgCols
	if f.OmitPayload {
		cols = withoutPayload(cols)
	}
	return `SELECT ` + cols + ` FROM ` + s.n.outbox + ` WHERE (` + strings.Join(where, ") AND (") +
		fmt.Sprintf(`) ORDER BY seq LIMIT $%d`, len(args)), args, nil
}

// Now is the database's time (Config.Clock's when set); see store.Admin.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	var t time.Time
	if err := s.pool.QueryRow(ctx, `SELECT `+nowExpr, s.now()).Scan(&t); err != nil {
		return time.Time{}, fmt.Errorf("postgres: now: %w", err)
	}
	return t, nil
}

// Cancel deletes an undelivered message no relay holds; see store.Admin.
func (s *Store) Cancel(ctx context.Context, id uuid.UUID) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var leased, dead bool
		err := tx.QueryRow(ctx, `SELECT `+s.inFlight("$2")+`, o.dead_lettered_at IS NOT NULL
			FROM `+s.n.outbox+` o WHERE o.id = $1::uuid AND o.published_at IS NULL FOR UPDATE`, id.String(), s.now()).Scan(&leased, &dead)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("%w: %s", store.ErrNotFound, id)
		case err != nil:
			return fmt.Errorf("postgres: cancel %s: %w", id, err)
		case dead:
			return fmt.Errorf("%w: %s", store.ErrDeadLettered, id)
		case leased:
			return fmt.Errorf("%w: %s", store.ErrLeased, id)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM `+s.n.outbox+` WHERE id = $1::uuid`, id.String()); err != nil {
			return fmt.Errorf("postgres: cancel %s: %w", id, err)
		}
		return nil
	})
}

// Audit records an operator's action; see store.Admin.
func (s *Store) Audit(ctx context.Context, r *store.AuditRecord) error {
	store.CleanAudit(r)
	err := s.pool.QueryRow(ctx, `INSERT INTO `+s.n.qual+`audit (at, actor, action, target, filter, count, notes)
		VALUES (coalesce($1, now()), $2, $3, $4, $5, $6, $7) RETURNING id, at`,
		s.now(), r.Actor, r.Action, r.Target, r.Filter, r.Count, r.Notes).Scan(&r.ID, &r.At)
	if err != nil {
		return fmt.Errorf("postgres: audit: %w", err)
	}
	return nil
}

// AuditLog lists audit records, newest first; see store.Admin.
func (s *Store) AuditLog(ctx context.Context, f store.AuditFilter) ([]*store.AuditRecord, error) {
	if !storable(f.Target, f.Action) {
		return []*store.AuditRecord{}, nil
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	rows, err := s.pool.Query(ctx, `SELECT id, at, actor, action, target, filter, count, notes FROM `+s.n.qual+`audit
		WHERE ($1 = '' OR target = $1) AND ($2 = '' OR action = $2) AND ($3::bigint = 0 OR id < $3)
		ORDER BY id DESC LIMIT $4`, f.Target, f.Action, f.BeforeID, limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: audit log: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*store.AuditRecord, error) {
		var r store.AuditRecord
		err := row.Scan(&r.ID, &r.At, &r.Actor, &r.Action, &r.Target, &r.Filter, &r.Count, &r.Notes)
		return &r, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: audit log: %w", err)
	}
	if out == nil {
		out = []*store.AuditRecord{}
	}
	return out, nil
}

// storable reports whether every value can be held by a text column: valid
// UTF-8 without NUL. A filter that is not matches nothing.
func storable(vs ...string) bool {
	for _, v := range vs {
		if !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0 {
			return false
		}
	}
	return true
}
