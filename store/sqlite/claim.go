package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
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
	at, err := s.claimTime(ctx, tx, now, lease)
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
// lease hold (noticeStep) is on, its end, which a stream whose head is
// leased waits for.
type claimAt struct {
	now, lapse, hold int64
}

// noLapse is a claimAt's lapse while a lease hold is on: before every
// expiry.
const noLapse = -1 << 62

// noticeStep records a lease hold (migration 0025) when the clock reads
// now further than half a lease past what this store expected from its
// last reading and the process's monotonic clock (s.ahead): the clock was
// stepped forward, and every lease looks lapsed while the relays that
// hold them still deliver them (they renew every third of a lease). For
// one lease no lease lapses, for any process on the database, while the
// holders renew theirs on the stepped clock. A hold that ends later, but
// no more than a lease later, is kept; one further ahead was set before
// the clock went back and is replaced.
func (s *Store) noticeStep(ctx context.Context, tx *sql.Tx, now time.Time, lease time.Duration) error {
	expect, ok := s.ahead.Expect()
	if !ok || now.Sub(expect) <= lease/2 {
		return nil
	}
	ahead := now.Sub(expect)
	if err := s.execCached(ctx, tx, `INSERT INTO {{prefix}}lease_hold (one, held_until, ahead, noticed_at)
		VALUES (1, :until, :ahead, :now)
		ON CONFLICT (one) DO UPDATE SET
			held_until = CASE WHEN held_until > excluded.held_until AND held_until <= excluded.held_until + :lease
				THEN held_until ELSE excluded.held_until END,
			ahead = excluded.ahead, noticed_at = excluded.noticed_at`,
		sql.Named("until", now.Add(lease).UnixMilli()), sql.Named("ahead", ahead.Milliseconds()),
		sql.Named("now", now.UnixMilli()), sql.Named("lease", lease.Milliseconds())); err != nil {
		return fmt.Errorf("record a lease hold: %w", err)
	}
	s.cfg.Log().LogAttrs(ctx, slog.LevelWarn, "the clock went forward: for one lease no lease lapses, "+
		"so that the relays holding them renew them on the new clock first",
		slog.String("store", "sqlite"), slog.Duration("ahead", ahead.Round(time.Millisecond)),
		slog.Duration("lease", lease))
	return nil
}

// claimTime is the time a claim at now, with lease its lease, runs at:
// while a lease hold is on, no lease lapses. A hold further ahead than
// two leases was set before the clock went back and holds nothing.
func (s *Store) claimTime(ctx context.Context, tx *sql.Tx, now time.Time, lease time.Duration) (claimAt, error) {
	at := claimAt{now: now.UnixMilli(), lapse: now.UnixMilli()}
	var hold sql.NullInt64
	err := s.queryRowCached(ctx, tx, `SELECT held_until FROM {{prefix}}lease_hold
		WHERE one = 1 AND held_until > :now AND held_until <= :now + 2 * :lease`,
		sql.Named("now", at.now), sql.Named("lease", lease.Milliseconds())).Scan(&hold)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return at, fmt.Errorf("read the lease hold: %w", err)
	case hold.Valid:
		at.lapse, at.hold = noLapse, hold.Int64
	}
	return at, nil
}

// jsonList encodes names as a JSON array for json_each; nil is [].
func jsonList(names []string) (string, error) {
	if len(names) == 0 {
		return "[]", nil
	}
	b, err := json.Marshal(names)
	return string(b), err
}
