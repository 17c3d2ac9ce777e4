package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// streamRows returns the outbox streams that have a row, and whether each
// is ready.
func streamRows(t *testing.T, s *Store) map[string]bool {
	t.Helper()
	rows, err := s.pool.Query(context.Background(), `SELECT stream, ready FROM `+s.n.qual+`streams`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for rows.Next() {
		var k string
		var ready bool
		if err := rows.Scan(&k, &ready); err != nil {
			t.Fatal(err)
		}
		got[k] = ready
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// deliver records every id as published, claiming nothing.
func deliver(t *testing.T, s *Store, ids ...uuid.UUID) {
	t.Helper()
	b := &store.Batch{Instance: store.Instance{ID: "i"}}
	for _, id := range ids {
		b.Completions = append(b.Completions, store.Completion{ID: id, Status: outbox.StatusPublished})
	}
	if _, err := s.ProcessBatch(context.Background(), b); err != nil {
		t.Fatal(err)
	}
}

// claimIDs claims up to 50 messages and returns their ids by stream.
func claimIDs(t *testing.T, s *Store) map[string][]uuid.UUID {
	t.Helper()
	r, err := s.ProcessBatch(context.Background(), &store.Batch{Instance: store.Instance{ID: "i"},
		Claim: store.ClaimRequest{Limit: 50}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]uuid.UUID{}
	for _, m := range r.Claimed {
		got[m.Stream] = append(got[m.Stream], m.ID)
	}
	return got
}

func enqueueStream(t *testing.T, s *Store, stream string) uuid.UUID {
	t.Helper()
	m := &outbox.Message{Destination: "d", Stream: stream, Type: "t", Payload: []byte("{}")}
	if err := s.Enqueue(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	return m.ID
}

// TestDeliveringAStreamsLastMessageRemovesItsRow: the change that delivers
// a stream's last undelivered message removes the stream's row (0014), with
// and without a retention period; a stream with messages left keeps it,
// woken for its next one, and a later write brings the row back.
func TestDeliveringAStreamsLastMessageRemovesItsRow(t *testing.T) {
	for _, retention := range []time.Duration{0, time.Hour} {
		t.Run("retention "+retention.String(), func(t *testing.T) {
			s, err := openTest(t, store.Config{Retention: retention})
			if err != nil {
				t.Fatal(err)
			}
			a1, a2 := enqueueStream(t, s, "a"), enqueueStream(t, s, "a")
			b1 := enqueueStream(t, s, "b")
			got := claimIDs(t, s)
			if len(got["a"]) != 2 || got["a"][0] != a1 || got["a"][1] != a2 || len(got["b"]) != 1 || got["b"][0] != b1 {
				t.Fatalf("claimed %v, want a's two messages and b's one", got)
			}
			deliver(t, s, a1, b1)
			if rows := streamRows(t, s); len(rows) != 1 || !rows["a"] {
				t.Fatalf("stream rows %v after delivering b's last message, want only a, ready", rows)
			}
			deliver(t, s, a2)
			if rows := streamRows(t, s); len(rows) != 0 {
				t.Fatalf("stream rows %v after every message was delivered, want none", rows)
			}
			b2 := enqueueStream(t, s, "b")
			if got := claimIDs(t, s); len(got["b"]) != 1 || got["b"][0] != b2 {
				t.Fatalf("claimed %v, want b's new message", got)
			}
		})
	}
}

// TestEmptiedStreamKeepsItsRowForAWriterInProgress: while a transaction
// writes to a stream, the delivery of the stream's last committed message
// leaves the row (the writer holds it; a wake-up is posted), and the
// writer's message is claimed once it commits. Under REPEATABLE READ, whose
// snapshot may predate a writer, the row is marked ready instead of going.
func TestEmptiedStreamKeepsItsRowForAWriterInProgress(t *testing.T) {
	ctx := context.Background()
	s, err := openTest(t, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	a1 := enqueueStream(t, s, "a")
	if got := claimIDs(t, s); len(got["a"]) != 1 {
		t.Fatalf("claimed %v, want a's message", got)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	a2 := &outbox.Message{Destination: "d", Stream: "a", Type: "t", Payload: []byte("{}")}
	if err := s.EnqueueTx(ctx, tx, a2); err != nil {
		t.Fatal(err)
	}
	deliver(t, s, a1)
	if rows := streamRows(t, s); len(rows) != 1 {
		t.Fatalf("stream rows %v while a writer holds the stream, want a's", rows)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := claimIDs(t, s); len(got["a"]) != 1 || got["a"][0] != a2.ID {
		t.Fatalf("claimed %v, want the writer's message", got)
	}

	// REPEATABLE READ: a2's delivery by plain SQL keeps the row, ready.
	rr, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rr.Exec(ctx, `DELETE FROM `+s.n.outbox+` WHERE id = $1`, a2.ID); err != nil {
		t.Fatal(err)
	}
	if err := rr.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if rows := streamRows(t, s); len(rows) != 1 || !rows["a"] {
		t.Fatalf("stream rows %v after a REPEATABLE READ delete, want a's, ready", rows)
	}
	if got := claimIDs(t, s); len(got) != 0 {
		t.Fatalf("claimed %v from an empty outbox", got)
	}
	if rows := streamRows(t, s); len(rows) != 0 {
		t.Fatalf("stream rows %v after a claim found the stream empty, want none", rows)
	}
}

// TestDeliveryOverManyStreamsPostsWakesForHeldRowsOnly: one recording of
// deliveries over many streams (migration 0025's set difference) posts a
// wake-up for exactly the streams whose rows writers hold, removes the
// emptied streams' rows, wakes a stream with a message left, and every
// message written is claimed once the writer commits.
func TestDeliveryOverManyStreamsPostsWakesForHeldRowsOnly(t *testing.T) {
	ctx := context.Background()
	s, err := openTest(t, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	streams := []string{"s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9"}
	var heads []uuid.UUID
	for _, k := range streams {
		heads = append(heads, enqueueStream(t, s, k))
	}
	if got := claimIDs(t, s); len(got) != len(streams) {
		t.Fatalf("claimed %v, want one message of each of %d streams", got, len(streams))
	}
	s7 := enqueueStream(t, s, "s7") // committed, behind s7's leased head
	// One writer holds s2 and s5 (the test's pool has two connections).
	held := map[string]uuid.UUID{}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	for _, k := range []string{"s2", "s5"} {
		m := &outbox.Message{Destination: "d", Stream: k, Type: "t", Payload: []byte("{}")}
		if err := s.EnqueueTx(ctx, tx, m); err != nil {
			t.Fatal(err)
		}
		held[k] = m.ID
	}
	deliver(t, s, heads...)

	rows, err := s.pool.Query(ctx, `SELECT stream FROM `+s.n.qual+`stream_wakes ORDER BY stream`)
	if err != nil {
		t.Fatal(err)
	}
	woken, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(woken) != 2 || woken[0] != "s2" || woken[1] != "s5" {
		t.Fatalf("wake-ups posted for %v, want the held streams s2 and s5", woken)
	}
	if got := streamRows(t, s); len(got) != 3 || !got["s7"] {
		t.Fatalf("stream rows %v, want s2 and s5 (held) and s7 (ready)", got)
	}
	if got := claimIDs(t, s); len(got) != 1 || len(got["s7"]) != 1 || got["s7"][0] != s7 {
		t.Fatalf("claimed %v while a writer holds s2 and s5, want s7's second message", got)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got := claimIDs(t, s)
	if len(got) != 2 || len(got["s2"]) != 1 || got["s2"][0] != held["s2"] || len(got["s5"]) != 1 || got["s5"][0] != held["s5"] {
		t.Fatalf("claimed %v once the writer committed, want its messages %v", got, held)
	}
}
