package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// ProcessBatch records the outcomes in b, renews leases and claims the
// next batch, atomically, as package store documents.
//
// A batch without failures is one round trip: every statement is sent in
// one pipeline, which PostgreSQL runs as one implicit transaction. A batch
// with failures takes two: the first begins a transaction and locks the
// failed rows to read their attempts (the failure decision,
// store.Config.DecideFailure, runs in Go with the destination's strategy),
// the second sends the rest and commits. Deadlocks and serialization
// failures are retried.
func (s *Store) ProcessBatch(ctx context.Context, b *store.Batch) (*store.Result, error) {
	if err := b.Validate(); err != nil {
		return nil, err
	}
	var (
		res *store.Result
		bad []badMessage
	)
	err := retryTx(ctx, func() error {
		var err error
		res, bad, err = s.processBatch(ctx, b)
		return err
	})
	swept := &store.Result{}
	if err != nil && refused(err) && s.sweepNow(ctx, b.Instance.ID, swept) > 0 {
		// rows written before the constraints, which refuse any update of
		// them (the claim's included), are quarantined now: try again
		err = retryTx(ctx, func() error {
			var err error
			res, bad, err = s.processBatch(ctx, b)
			return err
		})
	}
	if err != nil && refused(err) && hasOutcomes(b) {
		res, bad, err = s.processOneByOne(ctx, b)
	}
	if err != nil {
		switch {
		case timedOut(err):
			return nil, fmt.Errorf("postgres: process batch: %w: %w: %w", store.ErrUnavailable, store.ErrTimedOut, err)
		case Unavailable(err):
			return nil, fmt.Errorf("postgres: process batch: %w: %w", store.ErrUnavailable, err)
		}
		return nil, fmt.Errorf("postgres: process batch: %w", err)
	}
	res.Quarantined = append(res.Quarantined, swept.Quarantined...)
	s.quarantine(ctx, b.Instance.ID, bad, res)
	s.logRejected(ctx, b.Instance.ID, res)
	return res, nil
}

// pipeline is a pgx.Batch with a reader for each queued statement's
// results.
type pipeline struct {
	b       pgx.Batch
	readers []func(pgx.BatchResults) error
}

func (p *pipeline) exec(sql string, args ...any) {
	p.b.Queue(sql, args...)
	p.readers = append(p.readers, func(br pgx.BatchResults) error { _, err := br.Exec(); return err })
}

func (p *pipeline) query(read func(pgx.Rows) error, sql string, args ...any) {
	p.b.Queue(sql, args...)
	p.readers = append(p.readers, func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		defer rows.Close()
		if err := read(rows); err != nil {
			return err
		}
		return rows.Err()
	})
}

// run reads every result in order and closes br. Close returns the error
// a statement failed with again, which is said once.
func (p *pipeline) run(br pgx.BatchResults) error {
	var err error
	for _, r := range p.readers {
		if err = r(br); err != nil {
			break
		}
	}
	if cerr := br.Close(); cerr != nil && (err == nil || !errors.Is(err, cerr)) {
		err = errors.Join(err, cerr)
	}
	return err
}

// lazyCommitSQL asks the claim function, for this transaction, to commit
// without waiting for the disk when it leases no message of a stream
// (store.Batch.LazyCommit).
const lazyCommitSQL = `SELECT set_config('backstop.lazy_commit', 'on', true)`

func (s *Store) processBatch(ctx context.Context, b *store.Batch) (*store.Result, []badMessage, error) {
	res := &store.Result{}
	var bad []badMessage
	sawAt := s.ahead.Mono() // before the clock is read: see clockstep.Forward
	now := s.now()
	// The connection is taken before the statements are queued: the lease
	// hold's expectation of the clock (stepSQL) is read as they are, and
	// must not count a wait for a connection as the clock running ahead.
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer conn.Release()
	if len(b.Failures) == 0 {
		p := &pipeline{}
		s.queueBatch(p, b, now, sawAt, nil, res, &bad)
		if err := p.run(conn.SendBatch(ctx, &p.b)); err != nil {
			return nil, nil, err
		}
		sortClaimed(res)
		return res, bad, nil
	}
	err = func() error {
		first := &pipeline{}
		first.exec("begin")
		var locked []lockedRow
		first.query(func(rows pgx.Rows) error {
			for rows.Next() {
				var r lockedRow
				if err := rows.Scan(&r.id, &r.destination, &r.attempts, &r.instance, &r.parked); err != nil {
					return err
				}
				locked = append(locked, r)
			}
			return nil
		}, s.sql.lockFailures, pgUUIDs(sortedIDs(failureIDs(b.Failures))))
		if err := first.run(conn.SendBatch(ctx, &first.b)); err != nil {
			return err
		}
		fs := s.decideFailures(b, locked, res)
		second := &pipeline{}
		s.queueBatch(second, b, now, sawAt, fs, res, &bad)
		second.exec("commit")
		return second.run(conn.SendBatch(ctx, &second.b))
	}()
	if err != nil {
		if conn.Conn().PgConn().TxStatus() != 'I' {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			if _, rerr := conn.Exec(rctx, "rollback"); rerr != nil {
				_ = conn.Conn().Close(rctx) // the pool drops a closed connection
			}
			cancel()
		}
		return nil, nil, err
	}
	sortClaimed(res)
	return res, bad, nil
}

// queueBatch queues the statements of b in their order: the clock's
// step (when b renews or claims), heartbeat, dead instances, completions, failures (fs, when any), releases, renewals,
// claim. Their readers fill res.
//
// Claimed rows that cannot be decoded go to bad, to be quarantined.
func (s *Store) queueBatch(p *pipeline, b *store.Batch, now *time.Time, sawAt time.Duration, fs *failureArrays, res *store.Result, bad *[]badMessage) {
	me := b.Instance.ID
	lease := b.Claim.Lease
	if lease == 0 {
		lease = s.cfg.LeaseDuration
	}
	if len(b.RenewLeases) > 0 || b.Claim.Limit > 0 {
		// The now() of the transaction, from which the renewals and the
		// claim compute their expiries, and the clock's reading as this
		// statement runs, which the next batch expects the clock to be
		// past; a clock further past the expectation from the previous
		// reading than half a lease records a lease hold (stepSQL). It
		// comes first, so that the dead instances' statement reads the
		// step it records.
		var expect *time.Time
		if t, ok := s.ahead.Expect(); ok {
			expect = &t
		}
		p.query(func(rows pgx.Rows) error {
			for rows.Next() {
				var reading time.Time
				var held bool
				if err := rows.Scan(&res.Now, &reading, &held); err != nil {
					return err
				}
				s.ahead.Saw(reading, sawAt)
				if held {
					s.cfg.Log().LogAttrs(context.Background(), slog.LevelWarn,
						"the database's clock went forward: no lease lapses until those granted before "+
							"end as they would have, so that the relays holding them renew them on the new clock first",
						slog.String("store", "postgres"), slog.Duration("ahead", res.Now.Sub(*expect).Round(time.Millisecond)))
				}
			}
			return nil
		}, s.sql.step, now, expect, micros(lease), micros(store.StepThreshold(lease)))
	}
	if !b.SkipMaintenance {
		p.exec(s.sql.heartbeat, now, me, outbox.CleanText(b.Instance.Host, 200), int32(b.Instance.PID), nullTime(b.Instance.StartedAt))
		p.query(func(rows pgx.Rows) error {
			for rows.Next() {
				if err := rows.Scan(&res.DeadInstances); err != nil {
					return err
				}
			}
			return nil
		}, s.sql.deadInstances, now, me, micros(s.cfg.InstanceTimeout))
	}

	s.queueCompletions(p, b.Completions, now, me, res)
	if fs != nil && len(fs.ids) > 0 {
		p.exec(s.sql.fail, now, me, fs.ids, fs.flags, fs.attempts, fs.reasons, fs.errors,
			fs.fingerprints, fs.delays, fs.deadLetter)
		if len(fs.dlEntries) > 0 {
			p.exec(s.sql.deadLetter, now, fs.dlEntries, fs.dlIDs, fs.dlNames, fs.dlReasons, fs.dlMeta, fs.dlErrors)
		}
	}
	if fs != nil && len(fs.unpark) > 0 {
		p.exec(s.sql.unpark, me, fs.unpark)
	}
	if len(b.Releases) > 0 {
		rs := sortedReleases(b.Releases)
		ids := make([]pgtype.UUID, len(rs))
		after := make([]int64, len(rs))
		flags := make([]int32, len(rs))
		errs := make([]string, len(rs))
		for i, r := range rs {
			ids[i], after[i], flags[i] = pgUUID(r.ID), micros(r.After), int32(r.CompletedStatus)
			errs[i] = outbox.TruncateError(r.Error)
		}
		p.query(staleReader(rs, releaseID, res), s.sql.release, now, me, ids, after, flags, errs)
	}
	if len(b.RenewLeases) > 0 {
		ids := sortedIDs(b.RenewLeases)
		p.query(renewReader(ids, res), s.sql.renew, now, me, pgUUIDs(ids), micros(lease))
	}
	if b.Claim.Limit > 0 {
		if b.LazyCommit && len(b.Completions) == 0 && len(b.Failures) == 0 && len(b.Releases) == 0 {
			// The claim function commits lazily when it leased no message
			// of a stream (migration 0029).
			p.exec(lazyCommitSQL)
		}
		p.query(sweepReader(bad), s.life.sweep, now, me, sweepLimit)
		p.query(func(rows pgx.Rows) error {
			for rows.Next() {
				var r rawMessage
				if err := rows.Scan(r.claimDest()...); err != nil {
					return err
				}
				err := store.CheckClaimedSize(r.payloadLen.Int64, r.headersLen.Int64)
				var m *outbox.Message
				if err == nil {
					m, err = r.decode()
				}
				if err != nil {
					*bad = append(*bad, badMessage{raw: &r, err: err})
					continue
				}
				res.Claimed = append(res.Claimed, m)
			}
			return nil
		}, s.sql.claim, append([]any{now, me, b.Claim.Limit, micros(lease)}, s.claimArgs(b.Claim)...)...)
	}
}

// queueCompletions merges completions per id (flags OR-ed) and queues the
// delete of delivered messages (without retention) and the update of the
// others.
func (s *Store) queueCompletions(p *pipeline, cs []store.Completion, now *time.Time, instance string, res *store.Result) {
	if len(cs) == 0 {
		return
	}
	merged := map[uuid.UUID]outbox.Status{}
	for _, c := range cs {
		merged[c.ID] |= c.Status
	}
	ids := make([]uuid.UUID, 0, len(merged))
	for id := range merged {
		ids = append(ids, id)
	}
	ids = sortedIDs(ids)
	var del, upd, leased []pgtype.UUID
	var delivered []string
	var st, leasedSt []int32
	var leasedIDs []uuid.UUID
	for _, id := range ids {
		f := merged[id]
		switch {
		case !f.Has(outbox.StatusPublished):
			leased, leasedSt, leasedIDs = append(leased, pgUUID(id)), append(leasedSt, int32(f)), append(leasedIDs, id)
			continue
		case s.cfg.Retention == 0:
			del = append(del, pgUUID(id))
		default:
			upd, st = append(upd, pgUUID(id)), append(st, int32(f))
		}
		delivered = append(delivered, id.String())
	}
	if len(del) > 0 {
		p.exec(s.sql.deletePublished, del)
	}
	if len(upd) > 0 {
		p.exec(s.sql.complete, now, upd, st)
	}
	if len(leased) > 0 {
		p.query(staleReader(leasedIDs, func(id uuid.UUID) uuid.UUID { return id }, res),
			s.life.completeLeased, leased, leasedSt, instance)
	}
	if len(delivered) > 0 {
		p.exec(s.life.resolveDelivered, now, delivered, dlq.ActorBackstop, deliveredNote(instance))
	}
}

// resolveDeliveredSQL resolves the pending dead-letter entries of messages
// that were delivered after all (dead-lettered by hand while in flight),
// so that a later replay cannot send them twice.
const resolveDeliveredSQL = `UPDATE {d} SET status = 'resolved', resolved_by = $3, resolution_notes = $4,
	resolved_at = {now}
WHERE message_id = ANY($2::text[]) AND message_id <> '' AND status = 'pending'`

// deliveredNote is the resolution note of an entry whose message was
// delivered.
func deliveredNote(instance string) string {
	return outbox.TruncateError("delivered: relay instance " + instance +
		" completed the message after it was dead-lettered; nothing to replay")
}

// staleReader reads the ids an UPDATE ... RETURNING id applied and adds
// the others of items to res.Stale.
func staleReader[T any](items []T, idOf func(T) uuid.UUID, res *store.Result) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		applied := map[uuid.UUID]bool{}
		for rows.Next() {
			var id uuid.UUID
			if err := rows.Scan(&id); err != nil {
				return err
			}
			applied[id] = true
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for _, it := range items {
			if id := idOf(it); !applied[id] {
				res.Stale = append(res.Stale, id)
			}
		}
		return nil
	}
}

func releaseID(r store.Release) uuid.UUID { return r.ID }

func sortClaimed(res *store.Result) {
	sort.Slice(res.Claimed, func(i, j int) bool { return res.Claimed[i].Seq < res.Claimed[j].Seq })
}

// sortedIDs returns ids deduplicated in PostgreSQL's uuid order (bytewise),
// the order in which rows are locked.
func sortedIDs(ids []uuid.UUID) []uuid.UUID {
	out := append([]uuid.UUID(nil), ids...)
	sort.Slice(out, func(i, j int) bool { return lessUUID(out[i], out[j]) })
	k := 0
	for i, id := range out {
		if i == 0 || id != out[k-1] {
			out[k] = id
			k++
		}
	}
	return out[:k]
}

func lessUUID(a, b uuid.UUID) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

// sortedReleases returns rs in id order, keeping the first of duplicates.
func sortedReleases(rs []store.Release) []store.Release {
	out := append([]store.Release(nil), rs...)
	sort.SliceStable(out, func(i, j int) bool { return lessUUID(out[i].ID, out[j].ID) })
	k := 0
	for i, r := range out {
		if i == 0 || r.ID != out[k-1].ID {
			out[k] = r
			k++
		}
	}
	return out[:k]
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
