package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

var _ store.Inbox = (*Store)(nil)

// receivedTable is the inbox's de-duplication table.
func (s *Store) receivedTable() string { return s.n.qual + "inbox_received" }

// Receive implements store.Inbox: it writes m and the de-duplication
// record (inbox, messageID) in one transaction, or nothing when the record
// exists already (duplicate true). m is checked against outbox.MaxLimits,
// what the store can keep: the caller (inbox.Inbox.Receive) has checked it
// against its own Limits, which may be above the defaults. Two receivers of one message id at
// once are serialised by the record's primary key: the second waits for
// the first to commit and then sees a duplicate. A duplicate whose record
// keeps another digest (store.InboxDigest) is another message under a
// used id: store.ErrIDReused.
func (s *Store) Receive(ctx context.Context, inbox, messageID string, m *outbox.Message) (bool, error) {
	if err := m.PrepareLimits(outbox.MaxLimits); err != nil {
		return false, err
	}
	digest := store.InboxDigest(m)
	var dup bool
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO `+s.receivedTable()+` (inbox, message_id, received_at, row_id, digest)
			VALUES ($2, $3, `+nowExpr+`, $4::uuid, $5) ON CONFLICT (inbox, message_id) DO NOTHING`, s.now(), inbox, messageID, pgUUID(m.ID), digest)
		if err != nil {
			return fmt.Errorf("postgres: receive %q: %w", messageID, err)
		}
		if dup = tag.RowsAffected() == 0; dup {
			return s.sameContent(ctx, tx, inbox, messageID, digest)
		}
		return s.enqueue(ctx, tx, []*outbox.Message{m}, outbox.MaxLimits)
	})
	if errors.Is(err, store.ErrIDReused) {
		dup = false
	}
	return dup, err
}

// sameContent returns an *store.IDReusedError when the record of
// (inbox, messageID) keeps a digest other than digest; nil when it keeps
// the same, none (written before migration 0035), or is gone (swept
// meanwhile).
func (s *Store) sameContent(ctx context.Context, tx pgx.Tx, inbox, messageID string, digest []byte) error {
	var had []byte
	var row pgtype.UUID
	var at time.Time
	err := tx.QueryRow(ctx, `SELECT digest, row_id, received_at FROM `+s.receivedTable()+`
		WHERE inbox = $1 AND message_id = $2`, inbox, messageID).Scan(&had, &row, &at)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("postgres: receive %q: %w", messageID, err)
	case had == nil || bytes.Equal(had, digest):
		return nil
	}
	e := &store.IDReusedError{Inbox: inbox, MessageID: messageID, ReceivedAt: at}
	if row.Valid {
		e.RowID = row.Bytes
	}
	return e
}

// SweepReceived implements store.Inbox: it deletes at most limit records
// of inbox older than window, the oldest first, but none whose message is
// still in the outbox (waiting, retried or dead-lettered: migration 0033).
// The window ends the clock's steps forward within it later (stepsWithin).
func (s *Store) SweepReceived(ctx context.Context, inbox string, window time.Duration, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	t := s.receivedTable()
	tag, err := s.pool.Exec(ctx, `DELETE FROM `+t+` WHERE (inbox, message_id) IN (
		SELECT r.inbox, r.message_id FROM `+t+` r
		WHERE r.inbox = $2 AND r.received_at <= `+nowExpr+` - $3 * interval '1 microsecond' - `+s.stepsWithin("$3")+`
			AND NOT EXISTS (SELECT 1 FROM `+s.n.outbox+` o WHERE o.id = r.row_id AND o.published_at IS NULL)
		ORDER BY r.received_at LIMIT $4 FOR UPDATE OF r SKIP LOCKED)`,
		s.now(), inbox, window.Microseconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("postgres: sweep inbox %q: %w", inbox, err)
	}
	return int(tag.RowsAffected()), nil
}

var _ store.InboxCursors = (*Store)(nil)

// SaveInboxCursor implements store.InboxCursors.
func (s *Store) SaveInboxCursor(ctx context.Context, inbox, source string, next int64) error {
	if next < 0 {
		return fmt.Errorf("postgres: save inbox cursor %q: negative position %d", source, next)
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO `+s.n.qual+`inbox_cursors AS c (inbox, source, next, updated_at)
		VALUES ($2, $3, $4, `+nowExpr+`)
		ON CONFLICT (inbox, source) DO UPDATE SET next = excluded.next, updated_at = excluded.updated_at`,
		s.now(), inbox, source, next); err != nil {
		return fmt.Errorf("postgres: save inbox cursor %q: %w", source, err)
	}
	return nil
}

// InboxCursor implements store.InboxCursors.
func (s *Store) InboxCursor(ctx context.Context, inbox, source string) (int64, bool, error) {
	var next int64
	err := s.pool.QueryRow(ctx, `SELECT next FROM `+s.n.qual+`inbox_cursors WHERE inbox = $1 AND source = $2`,
		inbox, source).Scan(&next)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("postgres: inbox cursor %q: %w", source, err)
	}
	return next, true, nil
}

// CompleteTx marks message id delivered inside the caller's transaction
// tx if instanceID still holds its lease: it deletes the row, or marks it
// Published when a retention period is configured. The row stays locked
// until tx ends, so no other instance can claim it meanwhile. When the
// instance no longer holds the lease, or an operator dead-lettered the
// message meanwhile, it changes nothing and returns an error matching
// store.ErrLeaseLost; roll tx back then. After tx commits,
// the relay's own completion of the message changes nothing.
func (s *Store) CompleteTx(ctx context.Context, tx pgx.Tx, id uuid.UUID, instanceID string) error {
	q, args := `DELETE FROM `+s.n.outbox+` WHERE id = $1 AND instance_id = $2 AND status & 4 = 0 AND dead_lettered_at IS NULL`, []any{pgUUID(id), instanceID}
	if s.cfg.Retention > 0 {
		q = `UPDATE ` + s.n.outbox + ` SET status = status | 4, published_at = coalesce($3::timestamptz, now()),
			instance_id = NULL, lease_expiry = NULL WHERE id = $1 AND instance_id = $2 AND status & 4 = 0
			AND dead_lettered_at IS NULL`
		args = append(args, s.now())
	}
	tag, err := tx.Exec(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("postgres: complete %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: message %s is not leased by %s", store.ErrLeaseLost, id, instanceID)
	}
	return nil
}

// BeginTx implements store.Inbox: a transaction on the store's pool.
func (s *Store) BeginTx(ctx context.Context) (store.Tx, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("postgres: begin: %w", err)
	}
	return &inboxTx{s: s, tx: tx}, nil
}

// inboxTx is store.Tx on a pgx.Tx.
type inboxTx struct {
	s  *Store
	tx pgx.Tx
}

func (t *inboxTx) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := t.tx.Exec(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

func (t *inboxTx) QueryRow(ctx context.Context, query string, args ...any) store.Row {
	return t.tx.QueryRow(ctx, query, args...)
}

func (t *inboxTx) Enqueue(ctx context.Context, msgs ...*outbox.Message) error {
	return t.s.EnqueueTx(ctx, t.tx, msgs...)
}

// Complete completes the message in the inbox handler's transaction. A
// transaction that an earlier statement's failure aborted (25P02: the
// handler ignored that statement's error and returned nil) cannot complete
// anything: the error is marked the message's fault (transient, blamed on
// the message), so that the inbox charges the attempt. Taken for a fault
// of the database, it was never charged and the message was handled again
// for ever, tripping the inbox's breaker. So is a session the server
// ended because the handler held the transaction idle too long (25P03).
func (t *inboxTx) Complete(ctx context.Context, id uuid.UUID, instanceID string) error {
	err := t.s.CompleteTx(ctx, t.tx, id, instanceID)
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		if why, ok := handlerTxFaults[pe.Code]; ok {
			return errorhandling.WithBlame(errorhandling.Transient(fmt.Errorf("%w (%s)", err, why)), errorhandling.BlameMessage)
		}
	}
	return err
}

// handlerTxFaults are the errors completing an inbox message that the
// handler's use of its transaction caused, by SQLSTATE, with what to say
// of each (see Complete).
var handlerTxFaults = map[string]string{
	// the handler ignored a failed statement's error
	"25P02": "a statement of the handler failed and PostgreSQL aborted its transaction: return that statement's error, or run it under a savepoint",
	// the server ended the session: the handler's slowness, as a run past
	// the attempt's Timeout is, not a lost database
	"25P03": "the handler held its transaction idle past the server's idle_in_transaction_session_timeout",
}

func (t *inboxTx) Commit(ctx context.Context) error { return t.tx.Commit(ctx) }

func (t *inboxTx) Rollback(ctx context.Context) error {
	err := t.tx.Rollback(ctx)
	switch {
	case err == nil, errors.Is(err, pgx.ErrTxClosed):
		return nil
	case Unavailable(err):
		return fmt.Errorf("postgres: rollback: %w: %w", store.ErrUnavailable, err)
	}
	return err
}

func (t *inboxTx) Driver() any { return t.tx }
