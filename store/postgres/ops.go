package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// Get returns a message by id, or an error matching store.ErrNotFound. A
// row with values it cannot read comes back as store.ShowUndecodable
// leaves it.
func (s *Store) Get(ctx context.Context, id uuid.UUID) (*outbox.Message, error) {
	row := s.pool.QueryRow(ctx, `SELECT `+msgCols+` FROM `+s.n.outbox+` WHERE id = $1::uuid`, id.String())
	m, err := scanShown(row)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: %s", store.ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: get %s: %w", id, err)
	}
	return m, nil
}

// updateOne runs an UPDATE of one message by id and maps "no row" to
// store.ErrNotFound.
func (s *Store) updateOne(ctx context.Context, what, sql string, id uuid.UUID, args ...any) error {
	tag, err := s.pool.Exec(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("postgres: %s %s: %w", what, id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: %s", store.ErrNotFound, id)
	}
	return nil
}

// RetryNow makes a waiting message due now. It does not revive a
// dead-lettered message: replay its dead-letter entry for that.
func (s *Store) RetryNow(ctx context.Context, id uuid.UUID) error {
	err := s.updateOne(ctx, "retry now", `UPDATE `+s.n.outbox+`
		SET scheduled_for = `+nowExpr+` WHERE id = $2::uuid`, id, s.now(), id.String())
	if err == nil {
		s.wakeRelays(ctx)
	}
	return err
}

// ResetAttempts sets a message's attempts to zero, giving it the full
// attempt budget of its destination again.
func (s *Store) ResetAttempts(ctx context.Context, id uuid.UUID) error {
	return s.updateOne(ctx, "reset attempts", `UPDATE `+s.n.outbox+`
		SET attempts = 0 WHERE id = $1::uuid`, id, id.String())
}

// ReleaseStream marks the stream's undelivered messages that are
// dead-lettered, failed, or waiting for a later try as released: under
// strict ordering they stop holding the stream (they are still retried),
// until they are replayed. It returns how many it marked.
func (s *Store) ReleaseStream(ctx context.Context, destination, stream string) (int, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE `+s.n.outbox+` SET stream_released_at = `+nowExpr+`
		WHERE destination = $2 AND stream = $3 AND stream <> '' AND published_at IS NULL
		AND stream_released_at IS NULL
		AND (dead_lettered_at IS NOT NULL OR status & 32768 <> 0 OR scheduled_for > `+nowExpr+`)`,
		s.now(), destination, stream)
	if err != nil {
		return 0, fmt.Errorf("postgres: release stream %s/%s: %w", destination, stream, err)
	}
	s.wakeRelays(ctx)
	return int(tag.RowsAffected()), nil
}

// DeadLetter moves a message to the dead-letter queue by hand, in one
// transaction: the row is marked dead-lettered (its due time cleared) and
// an entry is added with reason PoisonMessage (seed 000's
// manual "mark as poison"), the operator's text as its error message, and
// the message's last error and reason in its metadata. A delivered or
// already dead-lettered message is refused. A message a relay is
// delivering keeps its lease: the delivery goes on, and its entry cannot
// be replayed (dlq.ErrInFlight) until it ends, so that a replay never puts
// a second delivery of it beside the first. If it is delivered, the entry
// is resolved; if it fails, it stays parked and its lease is dropped.
func (s *Store) DeadLetter(ctx context.Context, id uuid.UUID, reason string) error {
	return retryTx(ctx, func() error {
		return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return s.deadLetterTx(ctx, tx, id, reason) })
	})
}

func (s *Store) deadLetterTx(ctx context.Context, tx pgx.Tx, id uuid.UUID, reason string) error {
	var (
		dead, published bool
		lastErr         string
		lastReason      int32
	)
	err := tx.QueryRow(ctx, `SELECT dead_lettered_at IS NOT NULL, published_at IS NOT NULL,
		coalesce(error, ''), coalesce(failure_reason, 99)
		FROM `+s.n.outbox+` WHERE id = $1::uuid FOR UPDATE`, id.String()).Scan(&dead, &published, &lastErr, &lastReason)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: %s", store.ErrNotFound, id)
	case err != nil:
		return fmt.Errorf("postgres: dead-letter %s: %w", id, err)
	case dead:
		return fmt.Errorf("postgres: dead-letter %s: %w", id, store.ErrDeadLettered)
	case published:
		return fmt.Errorf("postgres: dead-letter %s: %w", id, store.ErrDelivered)
	}
	now := s.now()
	_, err = tx.Exec(ctx, `UPDATE `+s.n.outbox+` SET dead_lettered_at = `+nowExpr+`,
		scheduled_for = NULL WHERE id = $2::uuid`, now, id.String())
	if err != nil {
		return fmt.Errorf("postgres: dead-letter %s: %w", id, err)
	}
	meta := map[string]any{"dead_lettered_by": "operator"}
	if lastErr != "" {
		meta["last_error"] = lastErr
		meta["last_failure_reason"] = errorhandling.FailureReason(lastReason).String()
	}
	metaJSON, err := json.Marshal(meta)
	if err != nil {
		return fmt.Errorf("postgres: dead-letter %s: %w", id, err)
	}
	poison := errorhandling.ReasonPoisonMessage
	_, err = tx.Exec(ctx, s.sql.deadLetter, now, []string{newEntryID()}, []string{id.String()},
		[]string{poison.String()}, []int32{int32(poison)}, []string{string(metaJSON)},
		[]string{outbox.TruncateError(reason)})
	if err != nil {
		return fmt.Errorf("postgres: dead-letter %s: %w", id, err)
	}
	return nil
}

// Sweep deletes the delivered messages kept longer than the retention
// period and returns how many it deleted.
func (s *Store) Sweep(ctx context.Context) (int, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM `+s.n.outbox+`
		WHERE published_at IS NOT NULL AND published_at <= `+nowExpr+` - $2 * interval '1 microsecond'`,
		s.now(), micros(s.cfg.Retention))
	if err != nil {
		return 0, fmt.Errorf("postgres: sweep: %w", err)
	}
	return int(tag.RowsAffected()), nil
}
