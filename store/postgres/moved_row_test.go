package postgres

import (
	"context"
	"testing"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// TestRowMovedIntoAStreamBelowItsHeadIsClaimed: a row moved with plain SQL
// into a strict stream whose later messages were already claimed (an
// operator re-routing a retired destination's messages into one that has
// the stream), or written again with its old seq (a restore), is still
// claimed. The SQLite store stranded such a row below its stream's
// head_seq (its migration 0019); this holds the PostgreSQL store to the
// same.
func TestRowMovedIntoAStreamBelowItsHeadIsClaimed(t *testing.T) {
	admin(t)
	ctx := context.Background()
	s, err := openTest(t, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	inst := store.Instance{ID: "relay-1"}
	claim := func(done ...store.Completion) []*outbox.Message {
		t.Helper()
		r, err := s.ProcessBatch(ctx, &store.Batch{Instance: inst, Completions: done,
			Claim: store.ClaimRequest{Limit: 10, Destinations: []string{"billing"}}})
		if err != nil {
			t.Fatal(err)
		}
		return r.Claimed
	}
	// Claims until one comes back with messages, at most four.
	next := func(done ...store.Completion) []*outbox.Message {
		t.Helper()
		got := claim(done...)
		for range 3 {
			if len(got) > 0 {
				break
			}
			got = claim()
		}
		return got
	}

	t.Run("moved", func(t *testing.T) {
		old := &outbox.Message{Destination: "old", Stream: "order-1", Type: "t", Payload: []byte("first")}
		later := &outbox.Message{Destination: "billing", Stream: "order-1", Type: "t", Payload: []byte("second")}
		if err := s.Enqueue(ctx, old, later); err != nil {
			t.Fatal(err)
		}
		got := claim()
		if len(got) != 1 || got[0].ID != later.ID {
			t.Fatalf("first claim: %d messages, want the billing one", len(got))
		}
		if _, err := s.pool.Exec(ctx, `UPDATE `+s.n.outbox+` SET destination = 'billing' WHERE destination = 'old'`); err != nil {
			t.Fatal(err)
		}
		got = next(store.Completion{ID: later.ID, Status: outbox.StatusPublished})
		if len(got) != 1 || got[0].ID != old.ID {
			t.Fatalf("claims after the re-route: %d messages, want the moved one", len(got))
		}
		if _, err := s.ProcessBatch(ctx, &store.Batch{Instance: inst,
			Completions: []store.Completion{{ID: old.ID, Status: outbox.StatusPublished}}}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("restored", func(t *testing.T) {
		first := &outbox.Message{Destination: "billing", Stream: "order-2", Type: "t", Payload: []byte("first")}
		if err := s.Enqueue(ctx, first); err != nil {
			t.Fatal(err)
		}
		var seq int64
		if err := s.pool.QueryRow(ctx, `SELECT seq FROM `+s.n.outbox+` WHERE id = $1`, first.ID).Scan(&seq); err != nil {
			t.Fatal(err)
		}
		later := &outbox.Message{Destination: "billing", Stream: "order-2", Type: "t", Payload: []byte("second")}
		if err := s.Enqueue(ctx, later); err != nil {
			t.Fatal(err)
		}
		got := next()
		if len(got) != 2 {
			t.Fatalf("claimed %d, want both", len(got))
		}
		// The first was delivered, then its row is deleted and written
		// again as it was (a restore), before the second is recorded.
		if _, err := s.ProcessBatch(ctx, &store.Batch{Instance: inst,
			Completions: []store.Completion{{ID: first.ID, Status: outbox.StatusPublished}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.pool.Exec(ctx, `DELETE FROM `+s.n.outbox+` WHERE id = $1`, first.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := s.pool.Exec(ctx, `INSERT INTO `+s.n.outbox+` (seq, id, destination, stream, type, payload)
			OVERRIDING SYSTEM VALUE VALUES ($1, gen_random_uuid(), 'billing', 'order-2', 't', 'first')`, seq); err != nil {
			t.Fatal(err)
		}
		got = next(store.Completion{ID: later.ID, Status: outbox.StatusPublished})
		if len(got) != 1 || string(got[0].Payload) != "first" {
			t.Fatalf("claims after the restore: %d messages, want the one restored at seq %d", len(got), seq)
		}
	})
}
