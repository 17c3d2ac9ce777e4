package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// A lock_timeout (or statement_timeout) set on the role or database turns
// a row lock held by another session into an error of the store's call.
// It says nothing about the outcomes the call carried: it matches
// store.ErrUnavailable, as the same lock held past the call's own timeout
// does, so that the relay keeps the outcomes and records them once the
// lock is gone. Before, the relay took it for a refusal, dropped the
// outcome ("the store refused to record an outcome") and delivered the
// message again when its lease lapsed.
// lockedMessage returns a store whose sessions have a lock_timeout of
// 100 ms, and a message it leased to in, whose row another session holds
// until the returned transaction ends.
func lockedMessage(t *testing.T, ctx context.Context) (*Store, *outbox.Message, store.Instance, pgx.Tx) {
	t.Helper()
	schema := newSchema(t)
	pool := schemaPoolWith(t, schema, 2, map[string]string{"lock_timeout": "100ms"})
	s, err := New(pool, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	m, in := leasedMessage(t, ctx, s)
	locker, err := admin(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = locker.Rollback(context.Background()) })
	if _, err := locker.Exec(ctx, `SELECT 1 FROM `+schema+"."+s.OutboxTable()+` WHERE id = $1 FOR UPDATE`, pgUUID(m.ID)); err != nil {
		t.Fatal(err)
	}
	return s, m, in, locker
}

func TestRowLockPastLockTimeoutIsUnavailable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, m, in, locker := lockedMessage(t, ctx)
	for _, b := range []*store.Batch{
		{Instance: in, Completions: []store.Completion{{ID: m.ID}}},
		{Instance: in, Failures: []store.Failure{{ID: m.ID, Error: "boom"}}},
	} {
		_, err := s.ProcessBatch(ctx, b)
		if err == nil {
			t.Fatal("ProcessBatch went through a row lock held by another session")
		}
		if !errors.Is(err, store.ErrUnavailable) || !s.Unreachable(err) {
			t.Fatalf("ProcessBatch under a lock past lock_timeout: %v; want it to match store.ErrUnavailable", err)
		}
	}

	// The lock ends: the outcome kept is recorded.
	if err := locker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := s.ProcessBatch(ctx, &store.Batch{Instance: in, Completions: []store.Completion{{ID: m.ID}}})
	if err != nil || len(res.Stale) != 0 {
		t.Fatalf("recording after the lock ended: %v, stale %v", err, res.Stale)
	}
}

// TestBatchErrorSaysItOnce: a statement of a batch sent in one pipeline
// fails; the error says so once. Before, it said it twice, on two lines
// (the statement's error and the pipeline's close, the same error), in the
// relay's log and the admin API's.
func TestBatchErrorSaysItOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, m, in, _ := lockedMessage(t, ctx)
	_, err := s.ProcessBatch(ctx, &store.Batch{Instance: in, Completions: []store.Completion{{ID: m.ID}}})
	if err == nil {
		t.Fatal("ProcessBatch went through a row lock held by another session")
	}
	if n := strings.Count(err.Error(), "lock timeout"); n != 1 {
		t.Fatalf("the error says %d times that the lock timed out: %q", n, err)
	}
}

// TestRenewalPassesOverARowLockedElsewhere: another session (an
// operator's open transaction) holds locked the row of a message the
// relay leases. The renewal passes over it (Result.Deferred) and the rest
// of the call goes through. Before, the renewal waited for the lock: past
// lock_timeout (or the relay's 30 s) every claim call that renewed it
// failed, with the claim and every other renewal in it, for as long as the
// lock was held, and the relay's other leases lapsed.
func TestRenewalPassesOverARowLockedElsewhere(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, m, in, locker := lockedMessage(t, ctx)
	other := &outbox.Message{Destination: "d", Type: "t", Payload: []byte("y")}
	if err := s.Enqueue(ctx, other); err != nil {
		t.Fatal(err)
	}
	res, err := s.ProcessBatch(ctx, &store.Batch{Instance: in, RenewLeases: []uuid.UUID{m.ID}, Claim: store.ClaimRequest{Limit: 10}})
	if err != nil {
		t.Fatalf("renewing a lease whose row another session holds locked: %v", err)
	}
	if len(res.Claimed) != 1 || res.Claimed[0].ID != other.ID {
		t.Errorf("claimed %d messages, want the other one", len(res.Claimed))
	}
	if len(res.Deferred) != 1 || res.Deferred[0] != m.ID || len(res.Stale) != 0 || len(res.Renewed) != 0 {
		t.Errorf("Deferred %v, Stale %v, Renewed %v; want the locked lease deferred, neither stale nor renewed", res.Deferred, res.Stale, res.Renewed)
	}

	// The lock ends: the lease is renewed.
	if err := locker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	res, err = s.ProcessBatch(ctx, &store.Batch{Instance: in, RenewLeases: []uuid.UUID{m.ID}})
	if err != nil || len(res.Renewed) != 1 || res.Renewed[0].ID != m.ID || len(res.Deferred) != 0 {
		t.Fatalf("renewing after the lock ended: %v, Renewed %v, Deferred %v", err, res.Renewed, res.Deferred)
	}
}

// leasedMessage migrates s, enqueues a message and leases it to an
// instance, which it returns with it.
func leasedMessage(t *testing.T, ctx context.Context, s *Store) (*outbox.Message, store.Instance) {
	t.Helper()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	m := &outbox.Message{Destination: "d", Type: "t", Payload: []byte("x")}
	if err := s.Enqueue(ctx, m); err != nil {
		t.Fatal(err)
	}
	in := store.Instance{ID: "relay-1"}
	res, err := s.ProcessBatch(ctx, &store.Batch{Instance: in, Claim: store.ClaimRequest{Limit: 1}})
	if err != nil || len(res.Claimed) != 1 {
		t.Fatalf("claim: %v, %d claimed", err, len(res.Claimed))
	}
	return m, in
}
