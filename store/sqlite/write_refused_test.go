package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// A database that refuses writes for a while (SQLITE_READONLY: a file
// system remounted read-only after a disk error; PRAGMA query_only stands
// in for it) says nothing of the outcomes a batch carries: the batch
// matches store.ErrUnavailable and rejects none, so that the relay keeps
// them and records them once writes are taken again. Before, an outcome
// whose savepoint was the batch's first write was rejected alone, the
// relay dropped it and delivered its message again (seen once in
// relay's TestReadOnlyDatabaseKeepsTheOutcome: 9 deliveries of 8).
func TestWritesRefusedAreUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "b.db"), store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	m := &outbox.Message{Destination: "d", Type: "t"}
	if err := s.Enqueue(ctx, m); err != nil {
		t.Fatal(err)
	}
	in := store.Instance{ID: "relay-1"}
	res, err := s.ProcessBatch(ctx, &store.Batch{Instance: in, Claim: store.ClaimRequest{Limit: 1}})
	if err != nil || len(res.Claimed) != 1 {
		t.Fatalf("claim: %v, %d claimed", err, len(res.Claimed))
	}
	if _, err := s.DB().ExecContext(ctx, "PRAGMA query_only = 1"); err != nil {
		t.Fatal(err)
	}
	for _, b := range []*store.Batch{
		{Instance: in, SkipMaintenance: true, Completions: []store.Completion{{ID: m.ID}}},
		{Instance: in, SkipMaintenance: true, Failures: []store.Failure{{ID: m.ID, Error: "boom"}}},
	} {
		res, err := s.ProcessBatch(ctx, b)
		if !errors.Is(err, store.ErrUnavailable) || !s.Unreachable(err) {
			t.Fatalf("ProcessBatch while writes are refused: %v (result %+v); want it to match store.ErrUnavailable", err, res)
		}
	}
	if _, err := s.DB().ExecContext(ctx, "PRAGMA query_only = 0"); err != nil {
		t.Fatal(err)
	}
	res, err = s.ProcessBatch(ctx, &store.Batch{Instance: in, Completions: []store.Completion{{ID: m.ID}}})
	if err != nil || len(res.Rejected) != 0 || len(res.Stale) != 0 {
		t.Fatalf("recording once writes are taken: %v, rejected %v, stale %v", err, res.Rejected, res.Stale)
	}
}
