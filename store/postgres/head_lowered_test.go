package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// TestMessageMadeOrderedBelowTheHeadIsDelivered: a stream holds one
// ordered message and then 40 of ordering none; a claim that reads only
// messages of ordering none moves the stream's head past them (claim.md).
// An operator then gives one of those messages, still waiting, the stream's
// ordering with plain SQL (the update trigger wakes the stream on an
// ordering change, migration 0022), and a later ordered message is written.
// The message must still be delivered, and before the later one: it sits
// below the stream's head, where no stream read looks, and it is no longer
// unordered, so no claim takes it.
func TestMessageMadeOrderedBelowTheHeadIsDelivered(t *testing.T) {
	admin(t)
	t.Run("stream row free", func(t *testing.T) { messageMadeOrderedBelowTheHead(t, false) })
	// A claim holds the stream row when the update runs (the trigger posts
	// a wake-up) and then settles the head past the message.
	t.Run("stream row held", func(t *testing.T) { messageMadeOrderedBelowTheHead(t, true) })
}

func messageMadeOrderedBelowTheHead(t *testing.T, held bool) {
	s, err := openTest(t, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	in := store.Instance{ID: "i", StartedAt: time.Now()}
	batch := func(b store.Batch) *store.Result {
		t.Helper()
		b.Instance = in
		res, err := s.ProcessBatch(ctx, &b)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	first := &outbox.Message{Destination: "d", Stream: "s", Type: "t"}
	if err := s.Enqueue(ctx, first); err != nil {
		t.Fatal(err)
	}
	var none []*outbox.Message
	for i := range 40 {
		m := &outbox.Message{Destination: "d", Stream: "s", Type: "t", Ordering: outbox.OrderingNone, Payload: []byte(fmt.Sprint(i))}
		none = append(none, m)
	}
	if err := s.Enqueue(ctx, none...); err != nil {
		t.Fatal(err)
	}
	res := batch(store.Batch{Claim: store.ClaimRequest{Limit: 1}})
	if len(res.Claimed) != 1 || res.Claimed[0].ID != first.ID {
		t.Fatalf("first claim: %v", res.Claimed)
	}
	batch(store.Batch{Completions: []store.Completion{{ID: first.ID, Status: outbox.StatusPublished}}})
	// Reads the stream: only messages of ordering none past the head.
	res = batch(store.Batch{Claim: store.ClaimRequest{Limit: 1}})
	var head int64
	if err := s.Pool().QueryRow(ctx, `SELECT head_seq FROM `+s.n.qual+`streams WHERE destination = 'd' AND stream = 's'`).Scan(&head); err != nil {
		t.Fatal(err)
	}
	target := none[2]
	got, _ := s.Get(ctx, target.ID)
	t.Logf("stream head %d, target seq %d", head, got.Seq)
	var holder pgx.Tx
	if held {
		if holder, err = s.Pool().Begin(ctx); err != nil {
			t.Fatal(err)
		}
		defer holder.Rollback(ctx)
		if _, err := holder.Exec(ctx, `SELECT 1 FROM `+s.n.qual+`streams WHERE destination = 'd' AND stream = 's' FOR UPDATE`); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Pool().Exec(ctx, `UPDATE `+s.n.outbox+` SET ordering = NULL WHERE id = $1`, target.ID); err != nil {
		t.Fatal(err)
	}
	if held {
		var wakes int
		if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM `+s.n.qual+`stream_wakes WHERE head_seq IS NOT NULL`).Scan(&wakes); err != nil || wakes != 1 {
			t.Fatalf("wake-ups with a seq: %d, %v; want 1", wakes, err)
		}
		if _, err := holder.Exec(ctx, `UPDATE `+s.n.qual+`streams SET head_seq = head_seq + 1000, ready = false WHERE destination = 'd' AND stream = 's'`); err != nil {
			t.Fatal(err)
		}
		if err := holder.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	later := &outbox.Message{Destination: "d", Stream: "s", Type: "t", Payload: []byte("later")}
	if err := s.Enqueue(ctx, later); err != nil {
		t.Fatal(err)
	}
	var order []uuid.UUID
	var done []store.Completion
	for _, m := range res.Claimed {
		done = append(done, store.Completion{ID: m.ID, Status: outbox.StatusPublished})
	}
	for range 10 {
		res := batch(store.Batch{Completions: done, Claim: store.ClaimRequest{Limit: 100}})
		done = nil
		for _, m := range res.Claimed {
			if m.ID == target.ID || m.ID == later.ID {
				order = append(order, m.ID)
			}
			done = append(done, store.Completion{ID: m.ID, Status: outbox.StatusPublished})
		}
	}
	batch(store.Batch{Completions: done})
	if len(order) != 2 || order[0] != target.ID {
		left, _ := s.Get(ctx, target.ID)
		t.Fatalf("claimed %v of [target %s, later %s]; the target is left with seq %d below the head %d, never claimed",
			order, target.ID, later.ID, left.Seq, head)
	}
}
