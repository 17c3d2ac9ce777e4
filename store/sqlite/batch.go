package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// ProcessBatch heart-beats b.Instance, declares silent instances dead,
// applies completions, failures and releases, renews leases and claims the
// next messages, all in one IMMEDIATE transaction. Renewals extend a lease
// to now + Claim.Lease (or the configured LeaseDuration), never shortening
// it, and, like failures, releases and completions without Published, are
// applied only while the caller is the lease holder recorded on the
// message, expired or not.
//
// Each outcome is recorded in a savepoint of its own: one the database
// refuses is rolled back alone and reported in Result.Rejected, and the
// rest of the batch goes on. A claimed row that cannot be decoded is
// quarantined (dead-lettered with reason SerializationError) in the same
// transaction and reported in Result.Quarantined.
func (s *Store) ProcessBatch(ctx context.Context, b *store.Batch) (*store.Result, error) {
	if err := b.Validate(); err != nil {
		return nil, err
	}
	var (
		res *store.Result
		bad []badRow
	)
	var sawAt time.Duration
	err := s.write(ctx, func(tx *sql.Tx) error {
		sawAt = s.ahead.Mono() // before the clock is read: see clockstep.Forward
		now := s.now()
		res, bad = &store.Result{Now: now}, nil
		var err error
		steps := []func(context.Context, *sql.Tx, *store.Batch, *store.Result, time.Time) error{
			s.heartbeat, s.buryDeadInstances, s.applyCompletions, s.applyFailures, s.applyReleases, s.renewLeases,
		}
		if b.SkipMaintenance {
			steps = steps[2:]
		}
		if b.Claim.Limit > 0 || len(b.RenewLeases) > 0 {
			lease := b.Claim.Lease
			if lease == 0 {
				lease = s.cfg.LeaseDuration
			}
			if err := s.noticeStep(ctx, tx, now, lease); err != nil {
				return err
			}
		}
		for _, step := range steps {
			if err := step(ctx, tx, b, res, now); err != nil {
				return err
			}
		}
		if b.Claim.Limit > 0 {
			if bad, err = s.sweep(ctx, tx); err != nil {
				return err
			}
			if err := s.quarantine(ctx, tx, b.Instance.ID, bad, res, now); err != nil {
				return err
			}
		}
		claimed, rows, err := s.claim(ctx, tx, b.Instance.ID, b.Claim, now)
		if err != nil {
			return err
		}
		res.Claimed, bad = claimed, append(bad, rows...)
		return s.quarantine(ctx, tx, b.Instance.ID, rows, res, now)
	})
	if err == nil && (b.Claim.Limit > 0 || len(b.RenewLeases) > 0) {
		s.ahead.Saw(res.Now, sawAt)
	}
	if err != nil {
		if isExhausted(err) {
			// Not the outcomes' fault: the relay keeps them for the next call.
			return nil, fmt.Errorf("sqlite: process batch: %w: %w", store.ErrUnavailable, err)
		}
		return nil, fmt.Errorf("sqlite: process batch: %w", err)
	}
	s.logOutcomes(ctx, b.Instance.ID, res, bad)
	return res, nil
}

// savepoint runs fn in a savepoint of tx. An error the database raised for
// this outcome alone (a constraint, a trigger) rolls the savepoint back and
// is returned as rejected, for the caller to report; a busy database, one
// out of a resource (a full disk: it may have rolled the transaction back,
// and would refuse every outcome alike) or a done context fails the whole
// transaction.
func (s *Store) savepoint(ctx context.Context, tx *sql.Tx, fn func() error) (rejected, fatal error) {
	if err := s.execCached(ctx, tx, `SAVEPOINT outcome`); err != nil {
		return nil, err
	}
	err := fn()
	if err == nil {
		return nil, s.execCached(ctx, tx, `RELEASE outcome`)
	}
	if isBusy(err) || isExhausted(err) || ctx.Err() != nil {
		return nil, err
	}
	if rerr := s.execCached(ctx, tx, `ROLLBACK TO outcome`); rerr != nil {
		return nil, errors.Join(err, rerr)
	}
	if rerr := s.execCached(ctx, tx, `RELEASE outcome`); rerr != nil {
		return nil, errors.Join(err, rerr)
	}
	return err, nil
}

// outcome records one outcome of the batch in a savepoint, adding it to
// res.Rejected when the database refuses it.
func (s *Store) outcome(ctx context.Context, tx *sql.Tx, res *store.Result, id uuid.UUID, what string, fn func() error) error {
	rejected, fatal := s.savepoint(ctx, tx, fn)
	if fatal != nil {
		return fmt.Errorf("%s %s: %w", what, id, fatal)
	}
	if rejected != nil {
		res.Rejected = append(res.Rejected, store.Rejection{ID: id, Err: fmt.Errorf("%s %s: %w", what, id, rejected)})
	}
	return nil
}

// logOutcomes writes the operations log of what the batch could not do as
// asked: outcomes refused and rows quarantined.
func (s *Store) logOutcomes(ctx context.Context, instance string, res *store.Result, bad []badRow) {
	log := s.cfg.Log()
	for _, r := range res.Rejected {
		log.LogAttrs(ctx, slog.LevelError, "outcome not recorded", slog.String("store", "sqlite"),
			slog.String("instance_id", instance), slog.String("message_id", r.ID.String()),
			slog.String("error", outbox.TruncateError(r.Err.Error())))
	}
	for _, b := range bad {
		log.LogAttrs(ctx, slog.LevelError, "outbox row quarantined", slog.String("store", "sqlite"),
			slog.String("instance_id", instance), slog.String("message_id", outbox.CleanText(LenientText(b.raw[1]), 100)),
			slog.Any("seq", b.raw[0]), slog.String("reason", errorhandling.ReasonSerializationError.String()),
			slog.String("error", outbox.TruncateError(b.err.Error())))
	}
}

func (s *Store) heartbeat(ctx context.Context, tx *sql.Tx, b *store.Batch, _ *store.Result, now time.Time) error {
	in := b.Instance
	_, err := tx.ExecContext(ctx, s.sql(`INSERT INTO {{prefix}}instances (id, host, pid, started_at, last_heartbeat)
		VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET
			host = coalesce(nullif(excluded.host, ''), host),
			pid = coalesce(nullif(excluded.pid, 0), pid),
			started_at = coalesce(excluded.started_at, started_at),
			last_heartbeat = excluded.last_heartbeat`),
		in.ID, outbox.CleanText(in.Host, 200), in.PID, nullMillis(in.StartedAt), now.UnixMilli())
	return err
}

// buryDeadInstances deletes the instances silent for longer than the
// instance timeout and clears their leases. A heart-beat further ahead
// than the timeout can only come from a clock stepped back since: it is
// taken as of now, so that a dead instance goes one timeout later instead
// of holding its leases for the length of the step; a live one
// heart-beats again within the timeout.
func (s *Store) buryDeadInstances(ctx context.Context, tx *sql.Tx, b *store.Batch, res *store.Result, now time.Time) error {
	if _, err := tx.ExecContext(ctx, s.sql(`UPDATE {{prefix}}instances SET last_heartbeat = ?
		WHERE last_heartbeat > ? AND id <> ?`),
		now.UnixMilli(), now.Add(s.cfg.InstanceTimeout).UnixMilli(), b.Instance.ID); err != nil {
		return err
	}
	// A heartbeat from before a step forward of the clock is that much
	// younger than its stamp says (stepsWithin): past the timeout by its
	// stamp alone, every live instance would go, and its leases with it,
	// which the lease hold keeps from the other instances' claims.
	rows, err := tx.QueryContext(ctx, s.sql(`DELETE FROM {{prefix}}instances
		WHERE last_heartbeat < :now - :window - `+stepsWithin+` AND id <> :self RETURNING id`),
		sql.Named("now", now.UnixMilli()), sql.Named("window", s.cfg.InstanceTimeout.Milliseconds()),
		sql.Named("self", b.Instance.ID))
	if err != nil {
		return err
	}
	var dead []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return err
		}
		dead = append(dead, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(dead) == 0 {
		return err
	}
	list, err := jsonList(dead)
	if err != nil {
		return err
	}
	res.DeadInstances = len(dead)
	_, err = tx.ExecContext(ctx, s.sql(`UPDATE {{prefix}}outbox SET instance_id = NULL, lease_expiry = NULL
		WHERE instance_id IN (SELECT value FROM json_each(?))`), list)
	return err
}

func (s *Store) applyCompletions(ctx context.Context, tx *sql.Tx, b *store.Batch, res *store.Result, now time.Time) error {
	if ids := s.onlyDeletes(b.Completions); len(ids) > 1 {
		deleted, err := s.deleteDelivered(ctx, tx, ids)
		if err != nil {
			return err
		}
		if deleted {
			return s.resolveDelivered(ctx, tx, ids, b.Instance.ID, now)
		}
	}
	var delivered []string
	for _, c := range b.Completions {
		stale, applied := false, false
		err := s.outcome(ctx, tx, res, c.ID, "completion", func() error {
			var (
				n   int64
				err error
			)
			switch {
			case c.Status.Has(outbox.StatusPublished) && s.cfg.Retention == 0:
				err = s.execCached(ctx, tx, `DELETE FROM {{prefix}}outbox WHERE id = ?`, c.ID.String())
			case c.Status.Has(outbox.StatusPublished):
				_, err = tx.ExecContext(ctx, s.sql(`UPDATE {{prefix}}outbox
					SET status = status | ?, published_at = ?, instance_id = NULL, lease_expiry = NULL WHERE id = ?`),
					int32(c.Status), now.UnixMilli(), c.ID.String())
			default:
				n, err = affected(tx.ExecContext(ctx, s.sql(`UPDATE {{prefix}}outbox
					SET status = status | ?, instance_id = NULL, lease_expiry = NULL WHERE id = ? AND instance_id = ?`),
					int32(c.Status), c.ID.String(), b.Instance.ID))
				stale = err == nil && n == 0
			}
			applied = err == nil
			return err
		})
		if err != nil {
			return err
		}
		if stale {
			res.Stale = append(res.Stale, c.ID)
		}
		if applied && c.Status.Has(outbox.StatusPublished) {
			delivered = append(delivered, c.ID.String())
		}
	}
	return s.resolveDelivered(ctx, tx, delivered, b.Instance.ID, now)
}

// onlyDeletes returns the ids of cs when every one of them deletes its
// message (delivered, and no retention), the relay's usual batch; nil
// otherwise.
func (s *Store) onlyDeletes(cs []store.Completion) []string {
	if s.cfg.Retention != 0 {
		return nil
	}
	ids := make([]string, len(cs))
	for i, c := range cs {
		if !c.Status.Has(outbox.StatusPublished) {
			return nil
		}
		ids[i] = c.ID.String()
	}
	return ids
}

// deleteDelivered deletes the messages ids in one statement, in a
// savepoint of its own: three statements for the batch instead of three
// for each message. It reports false, having changed nothing, when the
// database refused the statement (a trigger of the user's, say); the
// caller then records each completion alone, so that only the refused one
// is rejected.
func (s *Store) deleteDelivered(ctx context.Context, tx *sql.Tx, ids []string) (bool, error) {
	list, err := jsonList(ids)
	if err != nil {
		return false, err
	}
	refused, fatal := s.savepoint(ctx, tx, func() error {
		return s.execCached(ctx, tx, `DELETE FROM {{prefix}}outbox WHERE id IN (SELECT value FROM json_each(?))`, list)
	})
	if fatal != nil {
		return false, fmt.Errorf("completions: %w", fatal)
	}
	return refused == nil, nil
}

// resolveDelivered resolves, in one statement, the pending dead-letter
// entries of messages that were delivered after all (dead-lettered by hand
// while in flight), so that a later replay cannot send them twice.
func (s *Store) resolveDelivered(ctx context.Context, tx *sql.Tx, ids []string, instance string, now time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	list, err := jsonList(ids)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, s.sql(`UPDATE {{prefix}}dead_letters
		SET status = 'resolved', resolved_by = ?, resolved_at = ?, resolution_notes = ?
		WHERE message_id IN (SELECT value FROM json_each(?)) AND message_id <> '' AND status = 'pending'`),
		dlq.ActorBackstop, now.UnixMilli(), deliveredNote(instance), list)
	return err
}

// deliveredNote is the resolution note of an entry whose message was
// delivered.
func deliveredNote(instance string) string {
	return outbox.TruncateError("delivered: relay instance " + instance +
		" completed the message after it was dead-lettered; nothing to replay")
}

func (s *Store) applyFailures(ctx context.Context, tx *sql.Tx, b *store.Batch, res *store.Result, now time.Time) error {
	for _, f := range b.Failures {
		stale, dead := false, false
		err := s.outcome(ctx, tx, res, f.ID, "failure", func() error {
			var err error
			stale, dead, err = s.applyFailure(ctx, tx, b, f, now)
			return err
		})
		switch {
		case err != nil:
			return err
		case stale:
			res.Stale = append(res.Stale, f.ID)
		case dead:
			res.DeadLettered = append(res.DeadLettered, f.ID)
		}
	}
	return nil
}

// applyFailure records one failure and says whether it was stale and
// whether it dead-lettered the message.
func (s *Store) applyFailure(ctx context.Context, tx *sql.Tx, b *store.Batch, f store.Failure, now time.Time) (stale, dead bool, err error) {
	row, err := s.leasedRow(ctx, tx, f.ID, b.Instance.ID)
	if err != nil {
		return false, false, err
	}
	if row == nil {
		return true, false, nil
	}
	if !row.DeadLetteredAt.IsZero() {
		// dead-lettered by an operator while this instance delivered it
		// (DeadLetter keeps the lease): it stays parked, without the lease,
		// so that its entry can be replayed
		_, err := tx.ExecContext(ctx, s.sql(`UPDATE {{prefix}}outbox SET instance_id = NULL, lease_expiry = NULL
			WHERE id = ?`), f.ID.String())
		return true, false, err
	}
	out := s.cfg.DecideFailure(row.Destination, row.Attempts, f)
	errText := outbox.TruncateError(f.Error)
	var scheduled, deadAt any
	if out.DeadLetter {
		deadAt = now.UnixMilli()
	} else {
		scheduled = now.Add(out.Delay).UnixMilli()
	}
	if _, err := tx.ExecContext(ctx, s.sql(`UPDATE {{prefix}}outbox SET
		status = status | ? | 32768, attempts = ?, error = ?, failure_reason = ?, fingerprint = ?,
		first_failed_at = coalesce(first_failed_at, ?), last_failed_at = ?,
		instance_id = NULL, lease_expiry = NULL, scheduled_for = ?, dead_lettered_at = ?
		WHERE id = ?`),
		int32(f.CompletedStatus), out.Attempts, errText, int(out.Reason), nullString(outbox.CleanText(f.Fingerprint, outbox.MaxErrorLength)),
		now.UnixMilli(), now.UnixMilli(), scheduled, deadAt, f.ID.String()); err != nil {
		return false, false, err
	}
	if !out.DeadLetter {
		return false, false, nil
	}
	first := row.firstFailed
	if first.IsZero() {
		first = now
	}
	e := row.entry()
	e.Reason, e.Attempts, e.ErrorMessage, e.Fingerprint = out.DeadLetterReason, out.Attempts, errText, f.Fingerprint
	e.FirstFailureTime, e.LastAttemptTime, e.FailureTime = first, now, now
	e.Metadata = map[string]any{"instance_id": b.Instance.ID, "last_failure_reason": out.Reason.String(), "permanent": f.Permanent}
	if err := s.insertEntry(ctx, tx, e, now); err != nil {
		return false, false, fmt.Errorf("dead-letter: %w", err)
	}
	return false, true, nil
}

func (s *Store) applyReleases(ctx context.Context, tx *sql.Tx, b *store.Batch, res *store.Result, now time.Time) error {
	for _, r := range b.Releases {
		var due any
		if r.After > 0 {
			due = now.Add(r.After).UnixMilli()
		}
		var errText any
		if r.Error != "" {
			errText = outbox.TruncateError(r.Error)
		}
		var n int64
		// A wait (a fault blamed on the destination) stamps the fault's
		// time as the last failure, as a retry does: RebaseSchedules moves
		// the wait by it when the clock is stepped back.
		var failed any
		if due != nil {
			failed = now.UnixMilli()
		}
		err := s.outcome(ctx, tx, res, r.ID, "release", func() error {
			var err error
			n, err = affected(tx.ExecContext(ctx, s.sql(`UPDATE {{prefix}}outbox SET
				instance_id = NULL, lease_expiry = NULL, status = status | ?,
				scheduled_for = CASE WHEN dead_lettered_at IS NULL THEN coalesce(?, scheduled_for) ELSE scheduled_for END,
				last_failed_at = CASE WHEN dead_lettered_at IS NULL THEN coalesce(?, last_failed_at) ELSE last_failed_at END,
				error = coalesce(?, error)
				WHERE id = ? AND instance_id = ?`),
				int32(r.CompletedStatus), due, failed, errText, r.ID.String(), b.Instance.ID))
			if err != nil {
				n = -1
			}
			return err
		})
		if err != nil {
			return err
		}
		if n == 0 {
			res.Stale = append(res.Stale, r.ID)
		}
	}
	return nil
}

func (s *Store) renewLeases(ctx context.Context, tx *sql.Tx, b *store.Batch, res *store.Result, now time.Time) error {
	lease := b.Claim.Lease
	if lease == 0 {
		lease = s.cfg.LeaseDuration
	}
	for _, id := range b.RenewLeases {
		var expiry int64
		err := tx.QueryRowContext(ctx, s.sql(`UPDATE {{prefix}}outbox SET lease_expiry = max(coalesce(lease_expiry, 0), ?)
			WHERE id = ? AND instance_id = ? RETURNING lease_expiry`), now.Add(lease).UnixMilli(), id.String(), b.Instance.ID).Scan(&expiry)
		if errors.Is(err, sql.ErrNoRows) {
			res.Stale = append(res.Stale, id)
			continue
		}
		if err != nil {
			return fmt.Errorf("renew %s: %w", id, err)
		}
		res.Renewed = append(res.Renewed, store.Lease{ID: id, Expiry: time.UnixMilli(expiry).UTC()})
	}
	return nil
}

func affected(r sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}

// fullRow is a message with the columns a dead-letter entry copies.
type fullRow struct {
	*outbox.Message
	firstFailed, lastFailed time.Time
}

// entry is the dead-letter entry of the row, before the failure fields.
func (r *fullRow) entry() *dlq.Entry {
	return &dlq.Entry{
		MessageID: r.ID.String(), Destination: r.Destination, Stream: r.Stream, Type: r.Type,
		Payload: r.Payload, Headers: r.Headers, Seq: r.Seq,
	}
}

// readRow reads a message and its first and last failure times; nil when
// absent.
func (s *Store) readRow(ctx context.Context, tx *sql.Tx, id uuid.UUID) (*fullRow, error) {
	var first, last sql.NullInt64
	m, err := scanMessage(withLeading{tx.QueryRowContext(ctx, s.sql(`SELECT first_failed_at, last_failed_at, `+
		messageColumns+` FROM {{prefix}}outbox WHERE id = ?`), id.String()), []any{&first, &last}})
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &fullRow{Message: m, firstFailed: fromMillis(first), lastFailed: fromMillis(last)}, nil
}

// leasedRow is readRow, nil unless instance holds the message's lease.
func (s *Store) leasedRow(ctx context.Context, tx *sql.Tx, id uuid.UUID, instance string) (*fullRow, error) {
	r, err := s.readRow(ctx, tx, id)
	if err != nil || r == nil || r.InstanceID != instance {
		return nil, err
	}
	return r, nil
}
