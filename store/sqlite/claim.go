package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// modeCase builds, once per store, the SQL expression giving the ordering
// mode of a message's destination (m.destination) from the configuration:
// a CASE over the destinations that have a policy, else the default mode.
func modeCase(cfg store.Config) string {
	lit := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	def := lit(string(cfg.DefaultPolicy.Ordering))
	if len(cfg.Policies) == 0 {
		return def
	}
	names := make([]string, 0, len(cfg.Policies))
	for name := range cfg.Policies {
		names = append(names, name)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("(CASE m.destination")
	for _, name := range names {
		b.WriteString(" WHEN " + lit(name) + " THEN " + lit(string(cfg.Policies[name].Ordering)))
	}
	b.WriteString(" ELSE " + def + " END)")
	return b.String()
}

// claim leases up to req.Limit messages to instance under the claim rules
// of package store (pickHeads chooses them, reading stream heads only) and
// returns them in seq order, and apart the leased rows it cannot decode (to
// be quarantined).
func (s *Store) claim(ctx context.Context, tx *sql.Tx, instance string, req store.ClaimRequest, now time.Time) ([]*outbox.Message, []badRow, error) {
	if req.Limit <= 0 {
		return nil, nil, nil
	}
	lease := req.Lease
	if lease == 0 {
		lease = s.cfg.LeaseDuration
	}
	expiry := now.Add(lease).UnixMilli()
	at, err := s.claimTime(ctx, tx, now)
	if err != nil {
		return nil, nil, err
	}
	seqs, err := s.pickHeads(ctx, tx, req, at, expiry)
	if err != nil || len(seqs) == 0 {
		return nil, nil, err
	}
	rows, err := s.queryCached(ctx, tx, leaseSeqs,
		sql.Named("instance", instance), sql.Named("expiry", expiry), sql.Named("seqs", seqList(seqs)))
	if err != nil {
		return nil, nil, err
	}
	ms, bad, err := scanClaimed(rows)
	if err != nil {
		return nil, nil, err
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Seq < ms[j].Seq })
	return ms, bad, nil
}

// claimAt is the time a claim runs at, in Unix milliseconds: now, for due
// times; lapse, at or before which a lease has lapsed; hold, when a
// step's hold (noticeStep) is on, its end, which a stream whose head is
// leased waits for.
type claimAt struct {
	now, lapse, hold int64
}

// maxHold is the longest a step's hold lasts from the step, whatever its
// row says (PostgreSQL's migration 0036 and stepSQL bound it the same).
const maxHold = time.Hour

// noLapse is a claimAt's lapse while a lease hold is on: before every
// expiry.
const noLapse = -1 << 62

// noticeStep records a step of the clock (clock_steps, migration 0025)
// when it reads now further than store.StepThreshold past what this store
// expected from its last reading and the process's monotonic clock
// (s.ahead): the clock was stepped forward, and every lease looks that
// much shorter than it is while the relays that hold them still deliver
// them. The step's hold lasts until the last lease granted before it ends
// as it would have without it (its expiry plus the step), at most an hour:
// until then no lease lapses, for any process on the database, while the
// holders renew theirs on the stepped clock. A step within a lease of the
// one recorded (the same step seen late by another store, or a second)
// lengthens that hold to a lease from now instead. The newest 1,000 steps
// are kept (the sweeps read those within their windows).
func (s *Store) noticeStep(ctx context.Context, tx *sql.Tx, now time.Time, lease time.Duration) error {
	expect, ok := s.ahead.Expect()
	if !ok || now.Sub(expect) <= store.StepThreshold(lease) {
		return nil
	}
	ahead := now.Sub(expect)
	r, err := tx.ExecContext(ctx, s.sql(`INSERT INTO {{prefix}}clock_steps (noticed_at, ahead, held_until)
		SELECT :now, :ahead, min(:now + :max_hold, max(:now,
			coalesce((SELECT max(lease_expiry) FROM {{prefix}}outbox WHERE instance_id IS NOT NULL AND (status & 4) = 0), 0) + :ahead))
		WHERE NOT EXISTS (SELECT 1 FROM {{prefix}}clock_steps WHERE noticed_at > :now - :lease AND noticed_at <= :now)
		ON CONFLICT DO NOTHING`),
		sql.Named("now", now.UnixMilli()), sql.Named("ahead", max(ahead.Milliseconds(), 1)),
		sql.Named("lease", lease.Milliseconds()), sql.Named("max_hold", maxHold.Milliseconds()))
	if err != nil {
		return fmt.Errorf("record a step of the clock: %w", err)
	}
	n, err := r.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		// A step within a lease of the one recorded, as likely the same
		// step seen by another store as a second one: the hold lasts a
		// lease from it, for the leases renewed between the steps look
		// shorter by the second; its ahead is not counted twice.
		_, err := tx.ExecContext(ctx, s.sql(`UPDATE {{prefix}}clock_steps SET held_until = min(noticed_at + :max_hold, max(held_until, :now + :lease))
			WHERE noticed_at = (SELECT max(noticed_at) FROM {{prefix}}clock_steps WHERE noticed_at > :now - :lease AND noticed_at <= :now)`),
			sql.Named("now", now.UnixMilli()), sql.Named("lease", lease.Milliseconds()),
			sql.Named("max_hold", maxHold.Milliseconds()))
		if err != nil {
			return fmt.Errorf("lengthen the hold of a step of the clock: %w", err)
		}
		return nil
	}
	if _, err := tx.ExecContext(ctx, s.sql(`DELETE FROM {{prefix}}clock_steps WHERE noticed_at < (
		SELECT noticed_at FROM {{prefix}}clock_steps ORDER BY noticed_at DESC LIMIT 1 OFFSET 1000)`)); err != nil {
		return fmt.Errorf("prune the steps of the clock: %w", err)
	}
	s.cfg.Log().LogAttrs(ctx, slog.LevelWarn, "the clock went forward: no lease lapses until those granted before "+
		"end as they would have, so that the relays holding them renew them on the new clock first",
		slog.String("store", "sqlite"), slog.Duration("ahead", ahead.Round(time.Millisecond)))
	return nil
}

// claimTime is the time a claim at now runs at: while a step's hold is
// on, no lease lapses. A step noticed ahead of now was recorded before
// the clock went back, and no hold lasts more than an hour from its step
// (a row written by hand with a later end holds no longer).
func (s *Store) claimTime(ctx context.Context, tx *sql.Tx, now time.Time) (claimAt, error) {
	at := claimAt{now: now.UnixMilli(), lapse: now.UnixMilli()}
	var hold sql.NullInt64
	err := s.queryRowCached(ctx, tx, holdSQL, sql.Named("now", at.now), sql.Named("max_hold", maxHold.Milliseconds())).Scan(&hold)
	if err != nil {
		return at, fmt.Errorf("read the steps of the clock: %w", err)
	}
	if hold.Valid {
		at.lapse, at.hold = noLapse, hold.Int64
	}
	return at, nil
}

// holdSQL is the end of the hold of a step of the clock that is on at
// :now, NULL when none is.
const holdSQL = `SELECT max(min(held_until, noticed_at + :max_hold)) FROM {{prefix}}clock_steps
	WHERE noticed_at > :now - :max_hold AND noticed_at <= :now AND min(held_until, noticed_at + :max_hold) > :now`

// rowQuerier is a database or a transaction.
type rowQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// lapseAt is the time, in unix milliseconds, at or before which a lease
// has lapsed at now, as a claim reads it (claimTime): now, or noLapse
// while the hold of a step of the clock is on. Operators' views and
// actions read a lease as live when its expiry is past it, so that a
// message still being delivered across a step is shown leased and is not
// cancelled or replayed under its relay.
func (s *Store) lapseAt(ctx context.Context, q rowQuerier, now time.Time) (int64, error) {
	var hold sql.NullInt64
	err := q.QueryRowContext(ctx, s.sql(holdSQL), sql.Named("now", now.UnixMilli()),
		sql.Named("max_hold", maxHold.Milliseconds())).Scan(&hold)
	if err != nil {
		return 0, fmt.Errorf("read the steps of the clock: %w", err)
	}
	if hold.Valid {
		return noLapse, nil
	}
	return now.UnixMilli(), nil
}

// stepsWithin is how much the clock was stepped forward, in milliseconds,
// by the steps recorded (clock_steps) within the window that ends at the
// named parameter :now and began :window milliseconds before: a record
// stamped before them is that much younger than its stamp says.
const stepsWithin = `coalesce((SELECT sum(c.ahead) FROM {{prefix}}clock_steps c
	WHERE c.noticed_at > :now - :window AND c.noticed_at <= :now), 0)`

// jsonList encodes names as a JSON array for json_each; nil is [].
func jsonList(names []string) (string, error) {
	if len(names) == 0 {
		return "[]", nil
	}
	b, err := json.Marshal(names)
	return string(b), err
}
