package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

var _ store.Inbox = (*Store)(nil)

// Receive implements store.Inbox: it writes m and the de-duplication
// record (inbox, messageID) in one transaction, or nothing when the record
// exists already (duplicate true). m is checked against outbox.MaxLimits,
// what the store can keep: the caller (inbox.Inbox.Receive) has checked it
// against its own Limits, which may be above the defaults. A duplicate
// whose record keeps another digest (store.InboxDigest) is another
// message under a used id: store.ErrIDReused.
func (s *Store) Receive(ctx context.Context, inbox, messageID string, m *outbox.Message) (bool, error) {
	if err := m.PrepareLimits(outbox.MaxLimits); err != nil {
		return false, err
	}
	digest := store.InboxDigest(m)
	var dup bool
	err := s.write(ctx, func(tx *sql.Tx) error {
		n, err := affected(tx.ExecContext(ctx, s.sql(`INSERT INTO {{prefix}}inbox_received (inbox, message_id, received_at, row_id, digest)
			VALUES (?, ?, ?, ?, ?) ON CONFLICT (inbox, message_id) DO NOTHING`), inbox, messageID, s.now().UnixMilli(), m.ID.String(), digest))
		if err != nil {
			return fmt.Errorf("sqlite: receive %q: %w", messageID, err)
		}
		if dup = n == 0; dup {
			return s.sameContent(ctx, tx, inbox, messageID, digest)
		}
		return s.enqueueTx(ctx, tx, []*outbox.Message{m}, true, outbox.MaxLimits)
	})
	if errors.Is(err, store.ErrIDReused) {
		dup = false
	}
	return dup, err
}

// sameContent returns an *store.IDReusedError when the record of
// (inbox, messageID) keeps a digest other than digest; nil when it keeps
// the same or none (written before migration 0023).
func (s *Store) sameContent(ctx context.Context, tx *sql.Tx, inbox, messageID string, digest []byte) error {
	var had []byte
	var row sql.NullString
	var at int64
	err := tx.QueryRowContext(ctx, s.sql(`SELECT digest, row_id, received_at FROM {{prefix}}inbox_received
		WHERE inbox = ? AND message_id = ?`), inbox, messageID).Scan(&had, &row, &at)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("sqlite: receive %q: %w", messageID, err)
	case had == nil || bytes.Equal(had, digest):
		return nil
	}
	e := &store.IDReusedError{Inbox: inbox, MessageID: messageID, ReceivedAt: time.UnixMilli(at).UTC()}
	if id, err := uuid.Parse(row.String); err == nil {
		e.RowID = id
	}
	return e
}

// SweepReceived implements store.Inbox: it deletes at most limit records
// of inbox older than window, the oldest first, but none whose message is
// still in the outbox (waiting, retried or dead-lettered: migration 0020).
// The window ends the clock's steps forward within it later (stepsWithin).
func (s *Store) SweepReceived(ctx context.Context, inbox string, window time.Duration, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	n, err := s.exec(ctx, `DELETE FROM {{prefix}}inbox_received WHERE rowid IN (
		SELECT r.rowid FROM {{prefix}}inbox_received r WHERE r.inbox = :inbox AND r.received_at <= :now - :window - `+stepsWithin+`
			AND NOT EXISTS (SELECT 1 FROM {{prefix}}outbox o WHERE o.id = r.row_id AND o.published_at IS NULL)
		ORDER BY r.received_at LIMIT :limit)`, sql.Named("inbox", inbox), sql.Named("now", s.now().UnixMilli()),
		sql.Named("window", window.Milliseconds()), sql.Named("limit", limit))
	if err != nil {
		return 0, fmt.Errorf("sqlite: sweep inbox %q: %w", inbox, err)
	}
	return int(n), nil
}

var _ store.InboxCursors = (*Store)(nil)

// SaveInboxCursor implements store.InboxCursors.
func (s *Store) SaveInboxCursor(ctx context.Context, inbox, source string, next int64) error {
	if next < 0 {
		return fmt.Errorf("sqlite: save inbox cursor %q: negative position %d", source, next)
	}
	if _, err := s.exec(ctx, `INSERT INTO {{prefix}}inbox_cursors (inbox, source, next, updated_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (inbox, source) DO UPDATE SET next = excluded.next, updated_at = excluded.updated_at`,
		inbox, source, next, s.now().UnixMilli()); err != nil {
		return fmt.Errorf("sqlite: save inbox cursor %q: %w", source, err)
	}
	return nil
}

// InboxCursor implements store.InboxCursors. A row that holds no valid
// position (written by hand: text, a real, a negative number) reads as
// none.
func (s *Store) InboxCursor(ctx context.Context, inbox, source string) (int64, bool, error) {
	rows, err := queryAll(ctx, s, `SELECT next FROM {{prefix}}inbox_cursors WHERE inbox = ? AND source = ?
		AND typeof(next) = 'integer' AND next >= 0`,
		[]any{inbox, source}, func(r *sql.Rows) (int64, error) {
			var next int64
			err := r.Scan(&next)
			return next, err
		})
	if err != nil {
		return 0, false, fmt.Errorf("sqlite: inbox cursor %q: %w", source, err)
	}
	if len(rows) == 0 {
		return 0, false, nil
	}
	return rows[0], true, nil
}

// CompleteTx marks message id delivered inside the caller's transaction
// tx (begun on DB()) if instanceID still holds its lease: it deletes the
// row, or marks it Published when a retention period is configured. When
// the instance no longer holds the lease, or an operator dead-lettered the
// message meanwhile, it changes nothing and returns an error matching
// store.ErrLeaseLost; roll tx back then. After tx commits,
// the relay's own completion of the message changes nothing.
func (s *Store) CompleteTx(ctx context.Context, tx *sql.Tx, id uuid.UUID, instanceID string) error {
	var res sql.Result
	var err error
	if s.cfg.Retention == 0 {
		res, err = tx.ExecContext(ctx, s.sql(`DELETE FROM {{prefix}}outbox
			WHERE id = ? AND instance_id = ? AND (status & 4) = 0 AND dead_lettered_at IS NULL`), id.String(), instanceID)
	} else {
		res, err = tx.ExecContext(ctx, s.sql(`UPDATE {{prefix}}outbox
			SET status = status | 4, published_at = ?, instance_id = NULL, lease_expiry = NULL
			WHERE id = ? AND instance_id = ? AND (status & 4) = 0 AND dead_lettered_at IS NULL`), s.now().UnixMilli(), id.String(), instanceID)
	}
	n, err := affected(res, err)
	if err != nil {
		return fmt.Errorf("sqlite: complete %s: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: message %s is not leased by %s", store.ErrLeaseLost, id, instanceID)
	}
	return nil
}

// BeginTx implements store.Inbox: a write transaction on the store's
// single writer connection. Until it ends, the store's other writes wait
// for it; do not call the store's own methods on the goroutine holding it.
func (s *Store) BeginTx(ctx context.Context) (store.Tx, error) {
	if s.readOnly {
		return nil, ErrReadOnly
	}
	if err := s.fileGone(ctx); err != nil {
		return nil, fmt.Errorf("sqlite: begin: %w", err)
	}
	if err := s.awaitTurn(ctx, time.Now()); err != nil {
		return nil, fmt.Errorf("sqlite: begin: %w", err)
	}
	var tx *sql.Tx
	err := retryBusy(ctx, func() error {
		var err error
		tx, err = s.w.BeginTx(ctx, nil)
		return err
	})
	if err != nil {
		s.turns.Release(1)
		return nil, fmt.Errorf("sqlite: begin: %w", err)
	}
	// The transaction's turn ends with it: at Commit or Rollback, or when
	// ctx is done (database/sql then rolls it back).
	end := sync.OnceFunc(func() { s.turns.Release(1) })
	context.AfterFunc(ctx, end)
	return &inboxTx{s: s, tx: tx, end: end}, nil
}

// inboxTx is store.Tx on a *sql.Tx.
type inboxTx struct {
	s   *Store
	tx  *sql.Tx
	end func() // gives the store's writes their turn back
}

// A statement of the handler's that fails because the database is out
// of a resource (a full disk, an I/O error, SQLITE_READONLY: isExhausted)
// fails with an error that also matches store.ErrUnavailable: the
// database's fault, not the message's, as a PostgreSQL connection lost
// inside the handler is. It was charged to the message as the handler's
// failure, and three brief full disks dead-lettered a good message.
func (t *inboxTx) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	n, err := affected(t.tx.ExecContext(ctx, query, args...))
	return n, unavailable(err)
}

func (t *inboxTx) QueryRow(ctx context.Context, query string, args ...any) store.Row {
	return unavailableRow{t.tx.QueryRowContext(ctx, query, args...)}
}

func (t *inboxTx) Enqueue(ctx context.Context, msgs ...*outbox.Message) error {
	return unavailable(t.s.EnqueueTx(ctx, t.tx, msgs...))
}

// unavailableRow is a row whose Scan's error says the database is out of
// a resource with store.ErrUnavailable (see inboxTx.Exec).
type unavailableRow struct{ row *sql.Row }

func (r unavailableRow) Scan(dest ...any) error { return unavailable(r.row.Scan(dest...)) }

// unavailable wraps err with store.ErrUnavailable when it is the database
// out of a resource (isExhausted), keeping the SQLite error in its chain.
func unavailable(err error) error {
	if err == nil || !isExhausted(err) || errors.Is(err, store.ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
}

func (t *inboxTx) Complete(ctx context.Context, id uuid.UUID, instanceID string) error {
	return t.s.CompleteTx(ctx, t.tx, id, instanceID)
}

func (t *inboxTx) Commit(context.Context) error {
	defer t.end()
	return t.tx.Commit()
}

func (t *inboxTx) Rollback(context.Context) error {
	defer t.end()
	if err := t.tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
		return err
	}
	return nil
}

func (t *inboxTx) Driver() any { return t.tx }
