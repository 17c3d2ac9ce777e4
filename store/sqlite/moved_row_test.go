package sqlite

import (
	"context"
	"testing"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// A row moved into a stream with plain SQL (an operator re-routing the
// messages of a retired destination: UPDATE ... SET destination = ...)
// whose seq is below the stream's head_seq is still claimed, and first:
// the claim read the stream from head_seq alone, so the moved message
// was never read, and once the stream drained its streams row was
// deleted and the message stayed in the outbox undelivered for good.
func TestRowMovedIntoAStreamBelowItsHeadIsClaimed(t *testing.T) {
	ctx := context.Background()
	s, _ := openTemp(t, store.Config{})
	old := &outbox.Message{Destination: "old", Stream: "order-1", Type: "t", Payload: []byte("first")}
	later := &outbox.Message{Destination: "billing", Stream: "order-1", Type: "t", Payload: []byte("second")}
	if err := s.Enqueue(ctx, old, later); err != nil {
		t.Fatal(err)
	}
	claim := func(done ...store.Completion) []*outbox.Message { return claimBilling(t, s, done...) }
	got := claim()
	if len(got) != 1 || got[0].ID != later.ID {
		t.Fatalf("first claim: %v, want the billing message", got)
	}
	// The operator re-routes the retired destination's messages.
	if _, err := s.w.ExecContext(ctx, s.sql(`UPDATE {{prefix}}outbox SET destination = 'billing' WHERE destination = 'old'`)); err != nil {
		t.Fatal(err)
	}
	got = claim(store.Completion{ID: later.ID, Status: outbox.StatusPublished})
	for range 3 {
		if len(got) > 0 {
			break
		}
		got = claim()
	}
	if len(got) != 1 || got[0].ID != old.ID {
		var pending int
		s.r.QueryRowContext(ctx, s.sql(`SELECT count(*) FROM {{prefix}}outbox WHERE (status & 4) = 0`)).Scan(&pending)
		t.Fatalf("claims after the re-route: %d messages, want the moved one (%d undelivered in the outbox)", len(got), pending)
	}
}

// The same for a row inserted with an explicit seq below the head (a copy
// of another outbox's rows, a restore): claimed, not stranded.
func TestRowInsertedBelowItsStreamHeadIsClaimed(t *testing.T) {
	ctx := context.Background()
	s, _ := openTemp(t, store.Config{})
	for range 3 {
		if err := s.Enqueue(ctx, &outbox.Message{Destination: "billing", Stream: "filler", Type: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	later := &outbox.Message{Destination: "billing", Stream: "order-1", Type: "t", Payload: []byte("second")}
	if err := s.Enqueue(ctx, later); err != nil {
		t.Fatal(err)
	}
	claim := func(done ...store.Completion) []*outbox.Message { return claimBilling(t, s, done...) }
	var done []store.Completion
	for _, m := range claim() {
		done = append(done, store.Completion{ID: m.ID, Status: outbox.StatusPublished})
	}
	// seq 1 was delivered and deleted; a restore writes it again.
	if _, err := s.w.ExecContext(ctx, s.sql(`DELETE FROM {{prefix}}outbox WHERE seq = 1`)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.ExecContext(ctx, s.sql(`INSERT INTO {{prefix}}outbox (seq, destination, stream, type, payload)
		VALUES (1, 'billing', 'order-1', 't', 'first')`)); err != nil {
		t.Fatal(err)
	}
	got := claim(done...)
	for range 3 {
		if len(got) > 0 {
			break
		}
		got = claim()
	}
	if len(got) != 1 || string(got[0].Payload) != "first" {
		t.Fatalf("claims after the insert: %d messages, want the one inserted at seq 1", len(got))
	}
}

// claimBilling records done and claims up to 10 messages of destination
// billing, as instance relay-1.
func claimBilling(t *testing.T, s *Store, done ...store.Completion) []*outbox.Message {
	t.Helper()
	r, err := s.ProcessBatch(context.Background(), &store.Batch{Instance: store.Instance{ID: "relay-1"}, Completions: done,
		Claim: store.ClaimRequest{Limit: 10, Destinations: []string{"billing"}}})
	if err != nil {
		t.Fatal(err)
	}
	return r.Claimed
}
