package postgres

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// The claim commits without waiting for the disk only when its caller
// asks (store.Batch.LazyCommit: backstop.lazy_commit) and it leased no
// message read from a stream: a lease lost to a crash under a stream's
// head would let a stale copy arrive after a later message.
func TestClaimCommitsLazilyOnlyWhenUnordered(t *testing.T) {
	s, err := openTest(t, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Enqueue(ctx,
		&outbox.Message{Destination: "plain", Type: "t"},
		&outbox.Message{Destination: "strict", Stream: "s", Type: "t"},
		&outbox.Message{Destination: "none", Stream: "s", Type: "t", Ordering: outbox.OrderingNone},
	); err != nil {
		t.Fatal(err)
	}
	// syncAfter claims destination dest in a transaction (rolled back),
	// lazily or not, and returns synchronous_commit as the commit would
	// have read it, with how many messages the claim leased.
	syncAfter := func(dest string, lazy bool) (string, int) {
		t.Helper()
		var mode string
		var n int
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			if lazy {
				if _, err := tx.Exec(ctx, lazyCommitSQL); err != nil {
					return err
				}
			}
			args := append([]any{nil, "i", 10, micros(s.cfg.LeaseDuration)},
				s.claimArgs(store.ClaimRequest{Destinations: []string{dest}})...)
			rows, err := tx.Query(ctx, s.sql.claim, args...)
			if err != nil {
				return err
			}
			for rows.Next() {
				n++
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			if err := tx.QueryRow(ctx, "SHOW synchronous_commit").Scan(&mode); err != nil {
				return err
			}
			return errRollback
		})
		if err != errRollback {
			t.Fatalf("claim of %s: %v", dest, err)
		}
		return mode, n
	}
	var base string // the server's own, which a claim that waits keeps
	if err := s.pool.QueryRow(ctx, "SHOW synchronous_commit").Scan(&base); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dest string
		lazy bool
		want string
	}{
		{"plain", true, "off"},
		{"none", true, "off"}, // ordering none: the unordered claim's
		{"strict", true, base},
		{"plain", false, base},
	} {
		if got, n := syncAfter(c.dest, c.lazy); got != c.want || n != 1 {
			t.Errorf("claim of %s (lazy %v) leased %d and commits with synchronous_commit %s, want 1 and %s", c.dest, c.lazy, n, got, c.want)
		}
	}
}
