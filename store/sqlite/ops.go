package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/store"
)

// exec runs one statement in a write transaction and returns the number of
// rows it changed.
func (s *Store) exec(ctx context.Context, query string, args ...any) (int64, error) {
	var n int64
	err := s.write(ctx, func(tx *sql.Tx) error {
		var err error
		n, err = affected(tx.ExecContext(ctx, s.sql(query), args...))
		return err
	})
	return n, err
}

// execOne is exec for a statement on one message: no row changed is
// store.ErrNotFound.
func (s *Store) execOne(ctx context.Context, op string, id uuid.UUID, query string, args ...any) error {
	n, err := s.exec(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("sqlite: %s %s: %w", op, id, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %s", store.ErrNotFound, id)
	}
	return nil
}

// RetryNow makes a waiting message due now. It does not revive a
// dead-lettered message: replay its dead-letter entry for that.
func (s *Store) RetryNow(ctx context.Context, id uuid.UUID) error {
	err := s.execOne(ctx, "retry now", id, `UPDATE {{prefix}}outbox SET scheduled_for = ? WHERE id = ?`,
		s.now().UnixMilli(), id.String())
	if err == nil {
		s.hub.Notify()
	}
	return err
}

// ResetAttempts sets a message's attempts to zero, giving it its full
// attempt budget again.
func (s *Store) ResetAttempts(ctx context.Context, id uuid.UUID) error {
	return s.execOne(ctx, "reset attempts", id, `UPDATE {{prefix}}outbox SET attempts = 0 WHERE id = ?`, id.String())
}

// ReleaseStream marks the not-published messages of (destination, stream)
// that hold it back under strict ordering (dead-lettered, failed, or waiting
// for a later try) as released, so that the later messages go on. Released
// messages are still retried when due; replaying one un-releases it. It
// returns how many messages it released.
func (s *Store) ReleaseStream(ctx context.Context, destination, stream string) (int, error) {
	now := s.now().UnixMilli()
	n, err := s.exec(ctx, `UPDATE {{prefix}}outbox SET stream_released_at = ?
		WHERE destination = ? AND stream = ? AND (status & 4) = 0 AND stream_released_at IS NULL
		  AND (dead_lettered_at IS NOT NULL OR (status & 32768) <> 0 OR scheduled_for > ?)`,
		now, destination, stream, now)
	if err != nil {
		return 0, fmt.Errorf("sqlite: release stream %s/%s: %w", destination, stream, err)
	}
	s.hub.Notify()
	return int(n), nil
}

// DeadLetter moves a message to the dead-letter queue by hand: the entry
// has reason PoisonMessage (seed 000's manual "mark as poison"), the
// operator's text as its error message, and the message's last error and
// reason in its metadata. The message's due time is cleared. A published
// or already dead-lettered message is refused. A message a relay is
// delivering keeps its lease: the delivery goes on, and its entry cannot
// be replayed (dlq.ErrInFlight) until it ends, so that a replay never puts
// a second delivery of it beside the first. If it is delivered, the entry
// is resolved; if it fails, it stays parked and its lease is dropped.
func (s *Store) DeadLetter(ctx context.Context, id uuid.UUID, reason string) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		row, err := s.readRow(ctx, tx, id)
		switch {
		case err != nil:
			return fmt.Errorf("sqlite: dead-letter %s: %w", id, err)
		case row == nil:
			return fmt.Errorf("%w: %s", store.ErrNotFound, id)
		case !row.DeadLetteredAt.IsZero():
			return fmt.Errorf("sqlite: dead-letter %s: %w at %s", id, store.ErrDeadLettered, row.DeadLetteredAt)
		case row.Status&4 != 0:
			return fmt.Errorf("sqlite: dead-letter %s: %w", id, store.ErrDelivered)
		}
		now := s.now()
		if _, err := tx.ExecContext(ctx, s.sql(`UPDATE {{prefix}}outbox SET dead_lettered_at = ?, scheduled_for = NULL
			WHERE id = ?`), now.UnixMilli(), id.String()); err != nil {
			return err
		}
		e := row.entry()
		e.Reason, e.Attempts, e.ErrorMessage, e.Fingerprint = errorhandling.ReasonPoisonMessage, row.Attempts, reason, row.Fingerprint
		e.FailureTime, e.FirstFailureTime, e.LastAttemptTime = now, row.firstFailed, row.lastFailed
		e.Metadata = map[string]any{"dead_lettered_by": "operator"}
		if row.Error != "" {
			e.Metadata["last_error"] = row.Error
			e.Metadata["last_failure_reason"] = row.FailureReason.String()
		}
		return s.insertEntry(ctx, tx, e, now)
	})
}

// Sweep deletes the published messages kept for the retention period once
// it has passed, and returns how many it deleted.
func (s *Store) Sweep(ctx context.Context) (int, error) {
	n, err := s.exec(ctx, `DELETE FROM {{prefix}}outbox WHERE published_at IS NOT NULL AND published_at <= ?`,
		s.now().Add(-s.cfg.Retention).UnixMilli())
	if err != nil {
		return 0, fmt.Errorf("sqlite: sweep: %w", err)
	}
	return int(n), nil
}
