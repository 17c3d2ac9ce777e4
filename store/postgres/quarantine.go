package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// badMessage is a claimed row that could not be decoded.
type badMessage struct {
	raw       *rawMessage
	err       error
	decodable bool // swept for a time the decoder does not read: the same batch may claim it
}

// quarantine dead-letters the claimed rows that could not be decoded, each
// with reason SerializationError and its decoding error (naming the column
// and the value), in one statement after the claim, and logs each. The
// claim committed their leases; the quarantine clears them, so they are
// not claimed again. If it fails, the rows keep their leases until they
// lapse and are quarantined by the next claim that takes them.
func (s *Store) quarantine(ctx context.Context, instance string, bad []badMessage, res *store.Result) {
	bad = uniqueSeqs(bad)
	if len(bad) > 0 && len(res.Claimed) > 0 {
		// A row the sweep took for a time the decoder does not read, and
		// that the claim of the same batch took too, is being delivered:
		// it is quarantined by a later sweep if it is still there.
		claimed := make(map[uuid.UUID]bool, len(res.Claimed))
		for _, m := range res.Claimed {
			claimed[m.ID] = true
		}
		kept := bad[:0:0]
		for _, b := range bad {
			if !b.decodable || !claimed[uuid.UUID(b.raw.id.Bytes)] {
				kept = append(kept, b)
			}
		}
		bad = kept
	}
	if len(bad) == 0 {
		return
	}
	reason := errorhandling.ReasonSerializationError
	log := s.cfg.Log()
	seqs := make([]int64, len(bad))
	errs, entries, metas := make([]string, len(bad)), make([]string, len(bad)), make([]string, len(bad))
	for i, b := range bad {
		seqs[i] = b.raw.seq.Int64
		errs[i] = outbox.TruncateError(fmt.Sprintf("undecodable outbox row (seq %d): %s", seqs[i], b.err))
		entries[i] = newEntryID()
		meta := map[string]any{"quarantined_by": instance}
		var ce *store.ColumnError
		if errors.As(b.err, &ce) {
			meta["column"], meta["value"] = ce.Column, store.FormatValue(ce.Value)
		}
		if _, err := store.DecodeHeaders(b.raw.headers); err != nil {
			meta["raw_headers"] = outbox.TruncateError(string(b.raw.headers))
		}
		j, _ := json.Marshal(meta)
		metas[i] = string(j)
		log.LogAttrs(ctx, slog.LevelError, "outbox row quarantined", slog.String("store", "postgres"),
			slog.String("instance_id", instance), slog.String("message_id", uuid.UUID(b.raw.id.Bytes).String()),
			slog.Int64("seq", seqs[i]), slog.String("reason", reason.String()), slog.String("error", errs[i]))
	}
	run := func(seqs []int64, errs, entries, metas []string) ([]uuid.UUID, error) {
		var done []uuid.UUID
		err := retryTx(ctx, func() error {
			rows, err := s.pool.Query(ctx, s.life.quarantine, s.now(), seqs, errs, int32(reason), entries, metas,
				instance, reason.String())
			if err != nil {
				return err
			}
			done, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
			return err
		})
		return done, err
	}
	done, err := run(seqs, errs, entries, metas)
	if err != nil && refused(err) && len(bad) > 1 {
		// One row the database refuses to dead-letter (an entry too wide
		// for the dead-letter queue's indexes) must not keep the others
		// out of it: each is quarantined in a statement of its own.
		done, err = nil, nil
		for i := range bad {
			one, oerr := run(seqs[i:i+1], errs[i:i+1], entries[i:i+1], metas[i:i+1])
			if oerr != nil {
				log.LogAttrs(ctx, slog.LevelError, "quarantining an outbox row failed; it is tried again when its lease lapses",
					slog.String("store", "postgres"), slog.Int64("seq", seqs[i]), slog.String("error", outbox.TruncateError(oerr.Error())))
				if !refused(oerr) {
					break
				}
				continue
			}
			done = append(done, one...)
		}
	}
	if err != nil {
		log.LogAttrs(ctx, slog.LevelError, "quarantining outbox rows failed; they are tried again when their leases lapse",
			slog.String("store", "postgres"), slog.Int("rows", len(bad)), slog.String("error", outbox.TruncateError(err.Error())))
		return
	}
	res.Quarantined = append(res.Quarantined, done...)
}

// refused reports whether err is the database refusing a value (a data
// exception, a constraint, a trigger's exception, a size limit) rather
// than failing: recording the outcomes one by one then isolates the one it
// refused.
func refused(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	for _, class := range []string{"22", "23", "54", "P0"} {
		if strings.HasPrefix(pe.Code, class) {
			return true
		}
	}
	return false
}

// Unavailable reports whether err says nothing of the statements' data:
// the connection could not be made, was closed or killed (SQLSTATE class
// 08, 57P01 to 57P03 when an administrator or a restart ends it), the
// server ran short of a resource (class 53: no connection left, disk full,
// out of memory), or the call timed out: on the client, or on the server
// (57014, a statement_timeout or a cancel; 55P03, a lock another session
// held past lock_timeout; 25P03, the session ended by
// idle_in_transaction_session_timeout between the two round trips of a
// batch with failures), which the same call waiting past its context's
// deadline would have been; or the server takes no writes now (25006: a
// standby, such as a primary that came back as one after a failover, or
// default_transaction_read_only set for a maintenance). The store wraps
// such errors with store.ErrUnavailable; the workflow store
// (workflow/wfpostgres) classifies its own statements' errors with it.
func Unavailable(err error) bool {
	if pgconn.SafeToRetry(err) || pgconn.Timeout(err) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.Code, "08") || strings.HasPrefix(pe.Code, "57P") || strings.HasPrefix(pe.Code, "53") ||
			pe.Code == "57014" || pe.Code == "55P03" || pe.Code == "25P03" || pe.Code == "25006"
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed)
}

// timedOut reports whether err is a statement cancelled for running too
// long (57014: a statement_timeout, or a cancel, which is how the client
// ends a statement past its context's deadline) or the call's deadline
// passing on the client: a smaller call may succeed (store.ErrTimedOut). A
// lock held past lock_timeout (55P03) is not: the same row is locked
// whatever the size of the call.
func timedOut(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) {
		return true
	}
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "57014"
}

// Unreachable reports whether err, from one of the store's calls, came of
// the database being out of reach (store.Reachability): it matches
// store.ErrUnavailable or Unavailable says so.
func (s *Store) Unreachable(err error) bool {
	return errors.Is(err, store.ErrUnavailable) || Unavailable(err)
}

func hasOutcomes(b *store.Batch) bool {
	return len(b.Completions)+len(b.Failures)+len(b.Releases) > 0
}

// processOneByOne records each outcome of b in a transaction of its own,
// reporting those the database refuses in Result.Rejected, then renews
// and claims. It is the slow path, taken only when the batch as a whole
// was refused: one poison outcome must not block the others or the claim.
func (s *Store) processOneByOne(ctx context.Context, b *store.Batch) (*store.Result, []badMessage, error) {
	res := &store.Result{}
	one := func(id uuid.UUID, what string, sub store.Batch) error {
		sub.Instance = b.Instance
		sub.Claim.Lease = b.Claim.Lease
		var r *store.Result
		err := retryTx(ctx, func() error {
			var err error
			r, _, err = s.processBatch(ctx, &sub)
			return err
		})
		switch {
		case err != nil && refused(err):
			res.Rejected = append(res.Rejected, store.Rejection{ID: id, Err: fmt.Errorf("%s %s: %w", what, id, err)})
			return nil
		case err != nil:
			return err
		}
		res.Stale = append(res.Stale, r.Stale...)
		res.DeadLettered = append(res.DeadLettered, r.DeadLettered...)
		res.DeadInstances += r.DeadInstances
		return nil
	}
	for _, c := range b.Completions {
		if err := one(c.ID, "completion", store.Batch{Completions: []store.Completion{c}}); err != nil {
			return nil, nil, err
		}
	}
	for _, f := range b.Failures {
		if err := one(f.ID, "failure", store.Batch{Failures: []store.Failure{f}}); err != nil {
			return nil, nil, err
		}
	}
	for _, r := range b.Releases {
		if err := one(r.ID, "release", store.Batch{Releases: []store.Release{r}}); err != nil {
			return nil, nil, err
		}
	}
	var (
		rest *store.Result
		bad  []badMessage
	)
	err := retryTx(ctx, func() error {
		var err error
		rest, bad, err = s.processBatch(ctx, &store.Batch{Instance: b.Instance, RenewLeases: b.RenewLeases, Claim: b.Claim})
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	rest.Stale = append(res.Stale, rest.Stale...)
	rest.DeadLettered = append(res.DeadLettered, rest.DeadLettered...)
	rest.DeadInstances += res.DeadInstances
	rest.Rejected = res.Rejected
	return rest, bad, nil
}

// logRejected writes the operations log of the outcomes the database
// refused.
func (s *Store) logRejected(ctx context.Context, instance string, res *store.Result) {
	for _, r := range res.Rejected {
		s.cfg.Log().LogAttrs(ctx, slog.LevelError, "outcome not recorded", slog.String("store", "postgres"),
			slog.String("instance_id", instance), slog.String("message_id", r.ID.String()),
			slog.String("error", outbox.TruncateError(r.Err.Error())))
	}
}

// sweepLimit bounds how many undecodable rows one batch quarantines.
const sweepLimit = 100

// sweepReader reads the rows sweepSQL found into bad, with the decoder's
// error, or, for a row it decodes, the times only validRow checks.
func sweepReader(bad *[]badMessage) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		for rows.Next() {
			var r rawMessage
			if err := rows.Scan(r.dest()...); err != nil {
				return err
			}
			_, err := r.decode()
			decodable := err == nil
			if decodable {
				// The sweep takes only rows outside validRow; the decoder
				// does not read the times below, so one of them is what
				// is wrong. Left alone, such a row came back first in
				// every sweep: a hundred of them filled sweepLimit, and no
				// row that came later was ever quarantined.
				err = &store.ColumnError{Column: "first_failed_at, last_failed_at, stream_released_at or published_at",
					Value: "infinity", Problem: "is not a finite time"}
			}
			*bad = append(*bad, badMessage{raw: &r, err: err, decodable: decodable})
		}
		return nil
	}
}

// uniqueSeqs drops the second sighting of a row (swept, then claimed).
func uniqueSeqs(bad []badMessage) []badMessage {
	seen := map[int64]bool{}
	out := bad[:0:0]
	for _, b := range bad {
		if !seen[b.raw.seq.Int64] {
			seen[b.raw.seq.Int64] = true
			out = append(out, b)
		}
	}
	return out
}

// sweepNow finds undecodable rows outside a batch and quarantines them,
// adding them to res.Quarantined, and returns how many it quarantined.
// ProcessBatch calls it when the database refused a batch: a row written
// before the constraints of migration 0002 breaks them, so even the
// claim's update of it is refused until it is quarantined (and mended).
func (s *Store) sweepNow(ctx context.Context, instance string, res *store.Result) int {
	var bad []badMessage
	rows, err := s.pool.Query(ctx, s.life.sweep, s.now(), instance, sweepLimit)
	if err == nil {
		err = sweepReader(&bad)(rows)
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	if err != nil {
		s.cfg.Log().LogAttrs(ctx, slog.LevelError, "sweeping for undecodable outbox rows failed",
			slog.String("store", "postgres"), slog.String("error", outbox.TruncateError(err.Error())))
		return 0
	}
	before := len(res.Quarantined)
	s.quarantine(ctx, instance, bad, res)
	return len(res.Quarantined) - before
}
