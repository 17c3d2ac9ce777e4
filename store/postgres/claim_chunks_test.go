package postgres

import (
	"context"
	"fmt"
	"testing"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// claimAs claims up to limit messages as instance and returns how many it
// leased of each stream.
func claimAs(t *testing.T, s *Store, instance string, limit int) map[string]int {
	t.Helper()
	r, err := s.ProcessBatch(context.Background(), &store.Batch{Instance: store.Instance{ID: instance},
		Claim: store.ClaimRequest{Limit: limit}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, m := range r.Claimed {
		got[m.Stream]++
	}
	return got
}

// enqueueStreams writes depth messages to each of n streams named
// prefix0, prefix1, ..., in one statement.
func enqueueStreams(t *testing.T, s *Store, prefix string, n, depth int) {
	t.Helper()
	var msgs []*outbox.Message
	for d := range depth {
		for i := range n {
			msgs = append(msgs, &outbox.Message{Destination: "d", Stream: fmt.Sprintf("%s%d", prefix, i),
				Type: "t", Payload: fmt.Appendf(nil, `{"d":%d}`, d)})
		}
	}
	if err := s.Enqueue(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}
}

// TestClaimReadsStreamsInChunks: the claim locks and reads ready streams in
// chunks until its cap is filled (0030). Over deep streams it fills the cap
// from the first ones, a share of 16 each; over a few streams they share
// the cap; and a first chunk whose streams all give nothing (ready, their
// heads leased to another instance) does not end the claim: the next
// chunks fill it, up to cap + 32 streams in all, as before.
func TestClaimReadsStreamsInChunks(t *testing.T) {
	t.Run("deep streams", func(t *testing.T) {
		s, err := openTest(t, store.Config{})
		if err != nil {
			t.Fatal(err)
		}
		enqueueStreams(t, s, "s", 300, 20)
		got := claimAs(t, s, "i", 256)
		if len(got) != 16 {
			t.Fatalf("claimed from %d streams (%v), want 16", len(got), got)
		}
		for k, n := range got {
			if n != 16 {
				t.Fatalf("claimed %d of %s, want its share of 16 (%v)", n, k, got)
			}
		}
	})
	t.Run("a few streams", func(t *testing.T) {
		s, err := openTest(t, store.Config{})
		if err != nil {
			t.Fatal(err)
		}
		enqueueStreams(t, s, "s", 4, 100)
		got := claimAs(t, s, "i", 256)
		if len(got) != 4 || got["s0"] != 64 || got["s1"] != 64 || got["s2"] != 64 || got["s3"] != 64 {
			t.Fatalf("claimed %v, want 64 of each of the four streams", got)
		}
	})
	t.Run("a first chunk that gives nothing", func(t *testing.T) {
		ctx := context.Background()
		s, err := openTest(t, store.Config{})
		if err != nil {
			t.Fatal(err)
		}
		enqueueStreams(t, s, "held", 40, 1)
		if got := claimAs(t, s, "other", 40); len(got) != 40 {
			t.Fatalf("the other instance claimed %v, want the 40 heads", got)
		}
		// Ready again with their first turns, as a wake-up leaves them,
		// while another instance's live leases hold their heads.
		if _, err := s.pool.Exec(ctx, `UPDATE `+s.n.qual+`streams SET ready = true, wait_until = NULL`); err != nil {
			t.Fatal(err)
		}
		enqueueStreams(t, s, "free", 110, 1)
		got := claimAs(t, s, "i", 100)
		n := 0
		for k, c := range got {
			if len(k) < 4 || k[:4] != "free" || c != 1 {
				t.Fatalf("claimed %d of %s (%v), want one message of each free stream only", c, k, got)
			}
			n += c
		}
		// Up to cap + 32 = 132 streams are read: the 40 held, then 92 or
		// more of the free ones (the chunks' bounds fall differently).
		if n < 90 {
			t.Fatalf("claimed %d messages, want at least 90 (%v)", n, got)
		}
	})
}
