package storetest

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

var enqueueCases = []testCase{
	{"AssignsIDAndStoredStatusAndRoundTripsFields", testEnqueueRoundTrip},
	{"BulkInsertInOneCallKeepsArgumentOrder", testEnqueueBulkOrder},
	{"InvalidMessageWritesNothing", testEnqueueInvalid},
	{"DuplicateIDFailsAndWritesNothing", testEnqueueDuplicate},
	{"EnqueueTxRollbackLeavesNothing", testEnqueueTxRollback},
	{"PlainSQLInsertIsDeliveredLikeOthers", testPlainSQLInsert},
	{"ScheduledForDelaysFirstDelivery", testEnqueueScheduled},
	{"GetUnknownIsNotFound", testGetUnknown},
	{"TraceParentFromContextIsStored", testTraceParentFromContext},
}

func testEnqueueRoundTrip(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := &outbox.Message{
		Destination: "billing",
		Stream:      "order-1",
		Type:        "order.created",
		Payload:     []byte{0, 1, 2, 0xff},
		Headers:     map[string]string{"X-Trace": "abc", "Content-Type": "application/json"},
		Ordering:    outbox.OrderingRelease,
	}
	e.enqueue(m)
	if m.ID == uuid.Nil {
		t.Fatal("Enqueue left the ID zero")
	}
	eq(t, "Status after Enqueue", m.Status, outbox.StatusStored)
	got := e.get(m.ID)
	eq(t, "Destination", got.Destination, "billing")
	eq(t, "Stream", got.Stream, "order-1")
	eq(t, "Type", got.Type, "order.created")
	eq(t, "Payload", string(got.Payload), string(m.Payload))
	eq(t, "Headers[X-Trace]", got.Headers["X-Trace"], "abc")
	eq(t, "len(Headers)", len(got.Headers), 2)
	eq(t, "Ordering", got.Ordering, outbox.OrderingRelease)
	eq(t, "Status", got.Status, outbox.StatusStored)
	eq(t, "Attempts", got.Attempts, 0)
	eq(t, "InstanceID", got.InstanceID, "")
	timeEq(t, "CreatedAt", got.CreatedAt, epoch)
	if !got.ScheduledFor.IsZero() || !got.LeaseExpiry.IsZero() || !got.DeadLetteredAt.IsZero() {
		t.Fatalf("fresh message has times set: %+v", got)
	}
	if got.Seq <= 0 {
		t.Fatalf("Seq = %d, want > 0", got.Seq)
	}
	eq(t, "Seq reported to the caller", m.Seq, got.Seq)
}

func testEnqueueBulkOrder(t *testing.T, h Harness) {
	e := newEnv(t, h)
	ms := msgs(60, "d", "s")
	for _, m := range ms {
		m.ID = uuid.New() // random ids: their order says nothing
	}
	e.enqueue(ms...)
	var prev int64
	for i, m := range ms {
		got := e.get(m.ID)
		if got.Seq <= prev {
			t.Fatalf("message %d has Seq %d after %d: seq must follow argument order", i, got.Seq, prev)
		}
		prev = got.Seq
	}
	e.claimExactly("a", 100, ms...)
}

func testEnqueueInvalid(t *testing.T, h Harness) {
	e := newEnv(t, h)
	good := msg("d", "s")
	bad := &outbox.Message{Destination: "d"} // no type
	err := e.s.Enqueue(e.ctx, good, bad)
	isErr(t, "Enqueue(good, bad)", err, outbox.ErrInvalidMessage)
	if good.ID != uuid.Nil {
		e.mustBeGone(good.ID)
	}
	e.claimExactly("a", 10)
	isErr(t, "Enqueue(bad ordering)", e.s.Enqueue(e.ctx, &outbox.Message{Destination: "d", Type: "t", Ordering: "sometimes"}), outbox.ErrInvalidMessage)
}

func testEnqueueDuplicate(t *testing.T, h Harness) {
	e := newEnv(t, h)
	first := e.enqueue(msg("d", "s"))[0]
	other := msg("d", "s")
	dup := msg("d", "s")
	dup.ID = first.ID
	if err := e.s.Enqueue(e.ctx, other, dup); err == nil {
		t.Fatal("Enqueue of an existing id succeeded")
	}
	e.mustBeGone(other.ID)
	e.claimExactly("a", 10, first)
}

func testEnqueueTxRollback(t *testing.T, h Harness) {
	if h.EnqueueTx == nil {
		t.Skip("harness has no EnqueueTx")
	}
	e := newEnv(t, h)
	rolled := msgs(2, "d", "s")
	noErr(t, "EnqueueTx (rolled back)", h.EnqueueTx(t, e.s, false, rolled...))
	for _, m := range rolled {
		e.mustBeGone(m.ID)
	}
	e.claimExactly("a", 10)

	kept := msgs(2, "d", "s")
	noErr(t, "EnqueueTx (committed)", h.EnqueueTx(t, e.s, true, kept...))
	eq(t, "Status", e.get(kept[0].ID).Status, outbox.StatusStored)
	e.claimExactly("a", 10, kept...)

	bad := []*outbox.Message{msg("d", "s"), {Destination: "d"}}
	isErr(t, "EnqueueTx(invalid)", h.EnqueueTx(t, e.s, true, bad...), outbox.ErrInvalidMessage)
}

func testPlainSQLInsert(t *testing.T, h Harness) {
	if h.InsertSQL == nil {
		t.Skip("harness has no InsertSQL")
	}
	e := newEnv(t, h)
	h.InsertSQL(t, e.s, "legacy", "user.signed_up", []byte(`{"user":42}`))
	typed := e.enqueue(msg("legacy", ""))[0]
	got := e.claim("a", 10)
	if len(got) != 2 {
		t.Fatalf("claimed %s, want the plain row and the typed one", label(got))
	}
	plain := got[0]
	if plain.ID == uuid.Nil {
		t.Fatal("plain SQL row has no id")
	}
	eq(t, "plain Destination", plain.Destination, "legacy")
	eq(t, "plain Stream", plain.Stream, "")
	eq(t, "plain Type", plain.Type, "user.signed_up")
	eq(t, "plain Payload", string(plain.Payload), `{"user":42}`)
	eq(t, "plain Status", plain.Status, outbox.StatusStored)
	eq(t, "plain Attempts", plain.Attempts, 0)
	eq(t, "plain Ordering", plain.Ordering, outbox.OrderingDefault)
	eq(t, "len(plain Headers)", len(plain.Headers), 0)
	if plain.CreatedAt.IsZero() {
		t.Fatal("plain row has no CreatedAt")
	}
	eq(t, "second claimed", got[1].ID, typed.ID)
	e.batch("a", store.Batch{
		Failures:    []store.Failure{{ID: plain.ID, Error: "down"}},
		Completions: []store.Completion{{ID: typed.ID, Status: outbox.StatusPublished}},
	})
	failed := e.get(plain.ID)
	eq(t, "plain Status after failure", failed.Status, outbox.StatusStored|outbox.StatusFailed)
	e.clk.Advance(time.Minute)
	e.claimExactly("b", 10, failed)
	e.complete("b", outbox.StatusPublished, plain.ID)
	e.mustBeGone(plain.ID)
}

func testEnqueueScheduled(t *testing.T, h Harness) {
	e := newEnv(t, h)
	later := msg("d", "")
	later.ScheduledFor = epoch.Add(10 * time.Minute)
	e.enqueue(later)
	timeEq(t, "ScheduledFor", e.get(later.ID).ScheduledFor, later.ScheduledFor)
	e.claimExactly("a", 10)
	e.clk.Advance(10*time.Minute - time.Millisecond)
	e.claimExactly("a", 10)
	e.clk.Advance(time.Millisecond)
	e.claimExactly("a", 10, later)
}

func testGetUnknown(t *testing.T, h Harness) {
	e := newEnv(t, h)
	e.mustBeGone(uuid.New())
}
