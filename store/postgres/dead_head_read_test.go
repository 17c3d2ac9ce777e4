package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

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

// TestClaimOfAStreamDoesNotReadItsPassedOverDeadLetters: a stream read
// passes over the dead letters that do not hold its stream (release
// ordering, strict once released), and kept its head at the first of them
// so that a replay would find it: every claim that visited the stream then
// read every one of them again (about 10,000 index entries of the outbox
// behind 5,000 of them). Once a read has passed over them, a claim of the
// next message of the stream reads about what it reads behind none.
func TestClaimOfAStreamDoesNotReadItsPassedOverDeadLetters(t *testing.T) {
	admin(t)
	for _, mode := range []outbox.Ordering{outbox.OrderingRelease, outbox.OrderingStrict} {
		t.Run(string(mode), func(t *testing.T) {
			few := claimReadsBehindDeadLetters(t, mode, 10)
			many := claimReadsBehindDeadLetters(t, mode, 5000)
			t.Logf("buffers a claim visited: %d behind 10 dead letters, %d behind 5,000", few, many)
			if many > few+500 {
				t.Fatalf("a claim of one message visited %d buffers behind 5,000 dead letters that do not hold its stream, %d behind 10", many, few)
			}
		})
	}
}

// claimReadsBehindDeadLetters builds a stream of destination d whose
// first dead messages are dead letters that do not hold it, has a claim
// deliver the live message behind them, and returns how many outbox rows
// and index entries the claim of the next live message reads, as buffers
// visited.
func claimReadsBehindDeadLetters(t *testing.T, mode outbox.Ordering, dead int) int64 {
	ctx := context.Background()
	s, err := openTest(t, store.Config{Policies: map[string]store.Policy{"d": {Ordering: mode}}})
	if err != nil {
		t.Fatal(err)
	}
	var msgs []*outbox.Message
	for i := range dead {
		msgs = append(msgs, &outbox.Message{Destination: "d", Stream: "r", Type: fmt.Sprint("dead-", i)})
	}
	if err := s.Enqueue(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	// dead-lettered as a permanent failure leaves them: not leased, not due
	if _, err := s.Pool().Exec(ctx, `UPDATE `+s.n.outbox+` SET dead_lettered_at = now()
		WHERE destination = 'd' AND stream = 'r'`); err != nil {
		t.Fatal(err)
	}
	if mode == outbox.OrderingStrict {
		if n, err := s.ReleaseStream(ctx, "d", "r"); err != nil || n != dead {
			t.Fatalf("release: %d, %v; want %d", n, err, dead)
		}
	}
	in := store.Instance{ID: "i", StartedAt: time.Now()}
	first := &outbox.Message{Destination: "d", Stream: "r", Type: "live-1"}
	if err := s.Enqueue(ctx, first); err != nil {
		t.Fatal(err)
	}
	r, err := s.ProcessBatch(ctx, &store.Batch{Instance: in, Claim: store.ClaimRequest{Limit: 10}})
	if err != nil || len(r.Claimed) != 1 || r.Claimed[0].ID != first.ID {
		t.Fatalf("claim behind %d dead letters: %+v, %v; want live-1", dead, r, err)
	}
	if _, err := s.ProcessBatch(ctx, &store.Batch{Instance: in,
		Completions: []store.Completion{{ID: first.ID, Status: outbox.StatusPublished}}}); err != nil {
		t.Fatal(err)
	}
	next := &outbox.Message{Destination: "d", Stream: "r", Type: "live-2"}
	if err := s.Enqueue(ctx, next); err != nil {
		t.Fatal(err)
	}

	// The claim function itself, in a transaction of the test's that is
	// rolled back, its buffers counted by EXPLAIN: each index entry and row
	// the claim reads is a buffer it visits. A first call for another
	// destination prepares most of the function's statements.
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	claim := `SELECT o.type FROM ` + s.n.qual + `claim(NULL, 'probe', 10, 30000000,
		ARRAY[$1::text], '{}', '{d}', ARRAY[$2::text], 'strict', '{}', '{}') o`
	if _, err := tx.Exec(ctx, claim, "another", string(mode)); err != nil {
		t.Fatal(err)
	}
	buffers, _ := planBuffers(t, tx, claim, "d", string(mode))
	var got []string
	rows, err := tx.Query(ctx, `SELECT type FROM `+s.n.outbox+` WHERE instance_id = 'probe'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var typ string
		if err := rows.Scan(&typ); err != nil {
			t.Fatal(err)
		}
		got = append(got, typ)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != "live-2" {
		t.Fatalf("claim behind %d dead letters got %v, want live-2", dead, got)
	}
	return buffers
}

// TestDeadLetterPassedOverUnderReleaseHoldsOnceStrict: a read moves a
// stream's head past the dead letters that do not hold it. A dead letter
// passed over while the destination's ordering was release holds its
// stream once the ordering is strict (a changed policy, no write to the
// row): the stream's next message waits, the stream counts as blocked, and
// a replay of the dead letter is delivered before it.
func TestDeadLetterPassedOverUnderReleaseHoldsOnceStrict(t *testing.T) {
	ctx := context.Background()
	rel, err := openTest(t, store.Config{Policies: map[string]store.Policy{"d": {Ordering: outbox.OrderingRelease}}})
	if err != nil {
		t.Fatal(err)
	}
	in := store.Instance{ID: "i", StartedAt: time.Now()}
	deliver := func(s *Store, want ...string) {
		t.Helper()
		r, err := s.ProcessBatch(ctx, &store.Batch{Instance: in, Claim: store.ClaimRequest{Limit: 10}})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		b := &store.Batch{Instance: in}
		for _, m := range r.Claimed {
			got = append(got, m.Type)
			b.Completions = append(b.Completions, store.Completion{ID: m.ID, Status: outbox.StatusPublished})
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("claimed %v, want %v", got, want)
		}
		if _, err := s.ProcessBatch(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	poison := &outbox.Message{Destination: "d", Stream: "r", Type: "poison"}
	if err := rel.Enqueue(ctx, poison); err != nil {
		t.Fatal(err)
	}
	r, err := rel.ProcessBatch(ctx, &store.Batch{Instance: in, Claim: store.ClaimRequest{Limit: 10}})
	if err != nil || len(r.Claimed) != 1 {
		t.Fatalf("claim of poison: %+v, %v", r, err)
	}
	if _, err := rel.ProcessBatch(ctx, &store.Batch{Instance: in, Failures: []store.Failure{{
		ID: poison.ID, Error: "refused", Reason: errorhandling.ReasonValidationFailure, Permanent: true}}}); err != nil {
		t.Fatal(err)
	}
	if err := rel.Enqueue(ctx, &outbox.Message{Destination: "d", Stream: "r", Type: "after-1"}); err != nil {
		t.Fatal(err)
	}
	deliver(rel, "after-1") // passes over the dead letter: release ordering

	strict, err := New(rel.Pool(), store.Config{Policies: map[string]store.Policy{"d": {Ordering: outbox.OrderingStrict}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := strict.Enqueue(ctx, &outbox.Message{Destination: "d", Stream: "r", Type: "after-2"}); err != nil {
		t.Fatal(err)
	}
	deliver(strict) // held by the dead letter
	if n, err := strict.BlockedStreams(ctx); err != nil || n != 1 {
		t.Fatalf("blocked streams: %d, %v; want 1", n, err)
	}
	es, err := strict.DLQ().List(ctx, &dlq.Filters{})
	if err != nil || len(es) != 1 {
		t.Fatalf("dead letters: %v, %v", es, err)
	}
	if err := strict.DLQ().Replay(ctx, es[0].ID); err != nil {
		t.Fatal(err)
	}
	deliver(strict, "poison", "after-2")
}
