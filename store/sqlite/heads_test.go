package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
)

// openHeads opens a store on a temporary file and enqueues n messages,
// message i in stream s<i mod streams> (interleaved, as concurrent
// writers leave them), and returns the store and the messages.
func openHeads(t *testing.T, n, streams int) (*sqlite.Store, []*outbox.Message) {
	t.Helper()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "heads.db"), store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	msgs := make([]*outbox.Message, n)
	for i := range msgs {
		msgs[i] = &outbox.Message{Destination: "d", Stream: fmt.Sprintf("s%d", i%streams), Type: "t"}
	}
	if err := s.Enqueue(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	return s, msgs
}

func claimN(t *testing.T, s *sqlite.Store, limit int) []*outbox.Message {
	t.Helper()
	res, err := s.ProcessBatch(context.Background(), &store.Batch{
		Instance: store.Instance{ID: "i"}, Claim: store.ClaimRequest{Limit: limit},
	})
	if err != nil {
		t.Fatal(err)
	}
	return res.Claimed
}

// A claim over many deep strict streams takes a share of each, not the
// whole limit from the first: a relay delivers a strict stream one
// message at a time, so a claim filled from one stream would leave its
// workers idle. Each stream's share is its first messages, in order.
func TestClaimSharesTheLimitAmongReadyStreams(t *testing.T) {
	t.Parallel()
	s, msgs := openHeads(t, 20*40, 20)
	seen := map[string]bool{}
	for round := range 2 {
		got := claimN(t, s, 100)
		if len(got) != 100 {
			t.Fatalf("round %d claimed %d, want 100", round, len(got))
		}
		per := map[string][]int64{}
		for _, m := range got {
			if seen[m.ID.String()] {
				t.Fatalf("round %d claimed %s again", round, m.ID)
			}
			seen[m.ID.String()] = true
			per[m.Stream] = append(per[m.Stream], m.Seq)
		}
		if len(per) < 100/16 {
			t.Errorf("round %d took from %d streams, want at least %d", round, len(per), 100/16)
		}
		for stream, seqs := range per {
			if len(seqs) > 16 {
				t.Errorf("round %d took %d messages of %s, want at most 16", round, len(seqs), stream)
			}
		}
	}
	// Every stream was taken from its head on, without a gap.
	next := map[string]bool{}
	for _, m := range msgs {
		claimed := seen[m.ID.String()]
		if claimed && next[m.Stream] {
			t.Fatalf("%s (seq %d) claimed behind an unclaimed message of its stream", m.ID, m.Seq)
		}
		if !claimed {
			next[m.Stream] = true
		}
	}
}

// What streams with little leave of the limit goes to a stream with more.
func TestClaimFillsTheLimitFromDeepStreams(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "heads.db"), store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var msgs []*outbox.Message
	for range 100 {
		msgs = append(msgs, &outbox.Message{Destination: "d", Stream: "deep", Type: "t"})
	}
	msgs = append(msgs, &outbox.Message{Destination: "d", Stream: "one", Type: "t"},
		&outbox.Message{Destination: "d", Stream: "two", Type: "t"})
	if err := s.Enqueue(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	got := claimN(t, s, 60)
	if len(got) != 60 {
		t.Fatalf("claimed %d, want 60", len(got))
	}
	for i, m := range got[:58] {
		if m.ID != msgs[i].ID {
			t.Fatalf("claimed[%d] = %s (seq %d), want deep's message %d", i, m.ID, m.Seq, i)
		}
	}
	if got[58].Stream != "one" || got[59].Stream != "two" {
		t.Fatalf("claimed ends with %s, %s; want one, two", got[58].Stream, got[59].Stream)
	}
}
