package postgres

import (
	"context"
	"fmt"
	"testing"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// TestClaimPassesOverDeadLettersThatDoNotHold: dead letters that do not
// hold their stream (release ordering; strict once the stream is released
// past them) stay in the outbox at its head. More of them than one read of
// the stream takes (its share of the claim plus a few rows) made the claim
// read only them, every time: the messages behind were never claimed. They
// are passed over, and a replay of one of them is claimed again.
func TestClaimPassesOverDeadLettersThatDoNotHold(t *testing.T) {
	for _, mode := range []outbox.Ordering{outbox.OrderingRelease, outbox.OrderingStrict} {
		t.Run(string(mode), func(t *testing.T) {
			ctx := context.Background()
			s, err := openTest(t, store.Config{Policies: map[string]store.Policy{"d": {Ordering: mode}}})
			if err != nil {
				t.Fatal(err)
			}
			const dead = 30
			for i := range dead {
				if err := s.Enqueue(ctx, &outbox.Message{Destination: "d", Stream: "r", Type: fmt.Sprint("dead-", i)}); err != nil {
					t.Fatal(err)
				}
				r, err := s.ProcessBatch(ctx, &store.Batch{Instance: store.Instance{ID: "i"}, Claim: store.ClaimRequest{Limit: 1}})
				if err != nil || len(r.Claimed) != 1 {
					t.Fatalf("claim of dead-%d (behind %d dead letters that do not hold the stream): %+v, %v", i, i, r, err)
				}
				if _, err := s.ProcessBatch(ctx, &store.Batch{Instance: store.Instance{ID: "i"}, Failures: []store.Failure{{
					ID: r.Claimed[0].ID, Error: "refused", Reason: errorhandling.ReasonValidationFailure, Permanent: true}}}); err != nil {
					t.Fatal(err)
				}
				if mode == outbox.OrderingStrict {
					if _, err := s.ReleaseStream(ctx, "d", "r"); err != nil {
						t.Fatal(err)
					}
				}
			}
			var msgs []*outbox.Message
			for i := range 3 {
				msgs = append(msgs, &outbox.Message{Destination: "d", Stream: "r", Type: fmt.Sprint("live-", i)})
			}
			for i := range 20 { // other ready streams: each stream's share of the claim is 16
				msgs = append(msgs, &outbox.Message{Destination: "d", Stream: fmt.Sprint("o", i), Type: "other"})
			}
			if err := s.Enqueue(ctx, msgs...); err != nil {
				t.Fatal(err)
			}
			got := map[string]bool{}
			for range 5 {
				r, err := s.ProcessBatch(ctx, &store.Batch{Instance: store.Instance{ID: "i"}, Claim: store.ClaimRequest{Limit: 50}})
				if err != nil {
					t.Fatal(err)
				}
				b := &store.Batch{Instance: store.Instance{ID: "i"}}
				for _, m := range r.Claimed {
					got[m.Type] = true
					b.Completions = append(b.Completions, store.Completion{ID: m.ID, Status: outbox.StatusPublished})
				}
				if _, err := s.ProcessBatch(ctx, b); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 3 {
				if !got[fmt.Sprint("live-", i)] {
					t.Fatalf("claimed %v: live-%d, behind %d dead letters that do not hold the stream, never was", got, i, dead)
				}
			}

			// a replay of a dead letter the claim passed over is claimed
			es, err := s.DLQ().List(ctx, &dlq.Filters{})
			if err != nil || len(es) != dead {
				t.Fatalf("dead letters: %d, %v; want %d", len(es), err, dead)
			}
			var replayed *dlq.Entry
			for _, e := range es {
				if e.Type == "dead-17" {
					replayed = e
				}
			}
			if err := s.DLQ().Replay(ctx, replayed.ID); err != nil {
				t.Fatal(err)
			}
			r, err := s.ProcessBatch(ctx, &store.Batch{Instance: store.Instance{ID: "i"}, Claim: store.ClaimRequest{Limit: 50}})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Claimed) != 1 || r.Claimed[0].Type != "dead-17" {
				t.Fatalf("claimed %d messages after the replay of dead-17 (%+v), want it alone", len(r.Claimed), r.Claimed)
			}
		})
	}
}
