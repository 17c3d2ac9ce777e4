package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// RunInbox runs the conformance tests of store.Inbox against the stores h
// opens, which must implement it. A store package wires it next to Run:
//
//	func TestInboxConformance(t *testing.T) { storetest.RunInbox(t, harness) }
//
// Decisions it pins down: a duplicate writes nothing (neither row nor
// record); de-duplication records are per inbox; Tx.Complete deletes the
// row (or marks it Published under a retention period) only for the lease
// holder, and a rolled-back transaction leaves the lease as it was.
func RunInbox(t *testing.T, h Harness) {
	if h.Open == nil {
		t.Fatal("storetest: Harness.Open is required")
	}
	for _, c := range inboxCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t, h)
		})
	}
}

var inboxCases = []testCase{
	{"ReceiveOnce", testReceiveOnce},
	{"ReceivePerInbox", testReceivePerInbox},
	{"ReceiveConcurrent", testReceiveConcurrent},
	{"ReceiveInvalid", testReceiveInvalid},
	{"ReceiveReusedID", testReceiveReusedID},
	{"Sweep", testSweepReceived},
	{"SweepAfterAClockStep", testSweepReceivedAcrossAStep},
	{"Cursors", testInboxCursors},
	{"CompleteCommits", testCompleteCommits},
	{"CompleteRolledBack", testCompleteRolledBack},
	{"CompleteLeaseLost", testCompleteLeaseLost},
	{"CompleteTwice", testCompleteTwice},
	{"CompleteRetention", testCompleteRetention},
}

// inboxEnv is env with the store as a store.Inbox.
func inboxEnv(t *testing.T, h Harness, opts ...option) (*env, store.Inbox) {
	t.Helper()
	e := newEnv(t, h, opts...)
	in, ok := e.s.(store.Inbox)
	if !ok {
		t.Fatalf("%T does not implement store.Inbox", e.s)
	}
	return e, in
}

func received(typ, stream string) *outbox.Message {
	return &outbox.Message{Destination: "inbox:orders", Stream: stream, Type: typ, Payload: []byte(typ)}
}

func (e *env) receive(in store.Inbox, inbox, id string, m *outbox.Message) bool {
	e.t.Helper()
	dup, err := in.Receive(e.ctx, inbox, id, m)
	noErr(e.t, "Receive "+id, err)
	return dup
}

func testReceiveOnce(t *testing.T, h Harness) {
	e, in := inboxEnv(t, h)
	first := received("order.created", "o-1")
	eq(t, "first receipt is a duplicate", e.receive(in, "orders", "m-1", first), false)
	again := received("order.created", "o-1")
	eq(t, "second receipt is a duplicate", e.receive(in, "orders", "m-1", again), true)
	other := received("order.paid", "o-1")
	eq(t, "another id is a duplicate", e.receive(in, "orders", "m-2", other), false)
	got := e.claim("i1", 10)
	sameIDs(t, "claimed", got, first, other)
	eq(t, "destination", got[0].Destination, "inbox:orders")
	eq(t, "type", got[0].Type, "order.created")
	eq(t, "stream", got[0].Stream, "o-1")
	eq(t, "payload", string(got[0].Payload), "order.created")
}

func testReceivePerInbox(t *testing.T, h Harness) {
	e, in := inboxEnv(t, h)
	eq(t, "orders m-1 duplicate", e.receive(in, "orders", "m-1", received("a", "")), false)
	eq(t, "billing m-1 duplicate", e.receive(in, "billing", "m-1", received("a", "")), false)
	eq(t, "orders m-1 again duplicate", e.receive(in, "orders", "m-1", received("a", "")), true)
}

// testReceiveConcurrent receives one id from many goroutines at once:
// exactly one writes.
func testReceiveConcurrent(t *testing.T, h Harness) {
	e, in := inboxEnv(t, h)
	const n = 8
	var wg sync.WaitGroup
	var mu sync.Mutex
	fresh, errs := 0, []error{}
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dup, err := in.Receive(e.ctx, "orders", "same", received("t", ""))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			} else if !dup {
				fresh++
			}
		}()
	}
	wg.Wait()
	noErr(t, "concurrent Receive", errors.Join(errs...))
	eq(t, "receipts written", fresh, 1)
	eq(t, "rows", len(e.claim("i1", 10)), 1)
}

// testReceiveReusedID receives one id for messages of different content
// from many goroutines at once: exactly one writes, and each of the others
// is refused with ErrIDReused naming the row the id was stored as, not
// taken for a duplicate; the written message received again is one.
func testReceiveReusedID(t *testing.T, h Harness) {
	e, in := inboxEnv(t, h)
	const n = 8
	msgs := make([]*outbox.Message, n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var fresh []*outbox.Message
	var dups, reused int
	var errs []error
	for i := range n {
		msgs[i] = received(fmt.Sprintf("t%d", i), "")
		wg.Add(1)
		go func() {
			defer wg.Done()
			dup, err := in.Receive(e.ctx, "orders", "same", msgs[i])
			mu.Lock()
			defer mu.Unlock()
			var re *store.IDReusedError
			switch {
			case errors.As(err, &re) && errors.Is(err, store.ErrIDReused) && !dup:
				reused++
			case err != nil:
				errs = append(errs, err)
			case dup:
				dups++
			default:
				fresh = append(fresh, msgs[i])
			}
		}()
	}
	wg.Wait()
	noErr(t, "concurrent Receive", errors.Join(errs...))
	eq(t, "receipts written", len(fresh), 1)
	eq(t, "taken for duplicates", dups, 0)
	eq(t, "refused as reused ids", reused, n-1)
	again := received(fresh[0].Type, "")
	again.Payload = fresh[0].Payload
	eq(t, "the written message again is a duplicate", e.receive(in, "orders", "same", again), true)
	other := received("t-other", "")
	_, err := in.Receive(e.ctx, "orders", "same", other)
	var re *store.IDReusedError
	if !errors.As(err, &re) || re.RowID != fresh[0].ID || re.MessageID != "same" || re.Inbox != "orders" {
		t.Fatalf("Receive of another message under a used id = %v; want an IDReusedError naming row %s", err, fresh[0].ID)
	}
	eq(t, "rows", len(e.claim("i1", 10)), 1)
}

// testReceiveInvalid: a message outbox validation refuses writes nothing,
// not even the record, so a corrected re-send is received.
func testReceiveInvalid(t *testing.T, h Harness) {
	e, in := inboxEnv(t, h)
	bad := received("order\x00created", "")
	if _, err := in.Receive(e.ctx, "orders", "m-1", bad); !errors.Is(err, outbox.ErrInvalidMessage) {
		t.Fatalf("Receive of a NUL type: err = %v, want outbox.ErrInvalidMessage", err)
	}
	eq(t, "re-send after an invalid one is a duplicate", e.receive(in, "orders", "m-1", received("ok", "")), false)
}

// testSweepReceived: records past the window go, the oldest first, in
// batches; a record whose message is still in the outbox (not handled:
// waiting, retried, dead-lettered) stays, so that a redelivery of it is
// still a duplicate.
func testSweepReceived(t *testing.T, h Harness) {
	e, in := inboxEnv(t, h)
	var old []*outbox.Message
	for i := range 6 {
		m := received("a", "")
		e.receive(in, "orders", fmt.Sprintf("old-%d", i), m)
		old = append(old, m)
	}
	e.receive(in, "billing", "old-b", received("a", ""))
	e.clk.Advance(time.Hour)
	e.receive(in, "orders", "new", received("a", ""))
	e.clk.Advance(time.Minute)
	adm, ok := e.s.(store.Admin)
	if !ok {
		t.Fatalf("%T does not implement store.Admin", e.s)
	}
	for _, m := range old[1:] { // handled, but for old-0
		noErr(t, "Cancel", adm.Cancel(e.ctx, m.ID))
	}

	n, err := in.SweepReceived(e.ctx, "orders", time.Hour, 3)
	noErr(t, "SweepReceived", err)
	eq(t, "first batch", n, 3)
	n, err = in.SweepReceived(e.ctx, "orders", time.Hour, 3)
	noErr(t, "SweepReceived", err)
	eq(t, "second batch", n, 2)
	n, err = in.SweepReceived(e.ctx, "orders", time.Hour, 3)
	noErr(t, "SweepReceived", err)
	eq(t, "third batch", n, 0)
	n, err = in.SweepReceived(e.ctx, "orders", time.Hour, 0)
	noErr(t, "SweepReceived limit 0", err)
	eq(t, "limit 0", n, 0)

	eq(t, "swept id received again is a duplicate", e.receive(in, "orders", "old-1", received("a", "")), false)
	eq(t, "id of a message still waiting is a duplicate past the window", e.receive(in, "orders", "old-0", received("a", "")), true)
	eq(t, "recent id is a duplicate", e.receive(in, "orders", "new", received("a", "")), true)
	eq(t, "other inbox's old id is a duplicate", e.receive(in, "billing", "old-b", received("a", "")), true)
}

// testSweepReceivedAcrossAStep: the clock steps forward an hour of a
// two-hour window (the store notices it at a claim) and an hour and a half
// passes: a record written before the step looks three and a half hours
// old by its stamp, but it is an hour and a half old and stays, so that
// a redelivery is still a duplicate; it goes once two hours and a bit
// have passed.
func testSweepReceivedAcrossAStep(t *testing.T, h Harness) {
	e, in := inboxEnv(t, h)
	adm, ok := e.s.(store.Admin)
	if !ok {
		t.Fatalf("%T does not implement store.Admin", e.s)
	}
	e.claim("a", 1) // the store's reading of its clock before the step
	m := received("a", "")
	e.receive(in, "orders", "before", m)
	noErr(t, "Cancel", adm.Cancel(e.ctx, m.ID)) // handled
	e.clk.Step(time.Hour)
	e.claim("a", 1) // notices the step
	e.clk.Advance(90 * time.Minute)
	n, err := in.SweepReceived(e.ctx, "orders", 2*time.Hour, 10)
	noErr(t, "SweepReceived", err)
	eq(t, "records swept an hour and a half after they were written", n, 0)
	eq(t, "redelivered inside the window is a duplicate", e.receive(in, "orders", "before", received("a", "")), true)
	e.clk.Advance(36 * time.Minute)
	n, err = in.SweepReceived(e.ctx, "orders", 2*time.Hour, 10)
	noErr(t, "SweepReceived", err)
	eq(t, "records swept past the window", n, 1)
}

// testInboxCursors: a receiver's cursor is kept per inbox and source, read
// back as last saved (moving back too: a stream declared again numbers
// from 0), and a negative position is refused.
func testInboxCursors(t *testing.T, h Harness) {
	e, _ := inboxEnv(t, h)
	c, ok := e.s.(store.InboxCursors)
	if !ok {
		t.Fatalf("%T does not implement store.InboxCursors", e.s)
	}
	cursor := func(inbox, source string) (int64, bool) {
		t.Helper()
		next, ok, err := c.InboxCursor(e.ctx, inbox, source)
		noErr(t, "InboxCursor", err)
		return next, ok
	}
	if _, ok := cursor("orders", "rabbitmq:q"); ok {
		t.Fatal("a cursor never saved reads as saved")
	}
	noErr(t, "SaveInboxCursor", c.SaveInboxCursor(e.ctx, "orders", "rabbitmq:q", 41))
	noErr(t, "SaveInboxCursor", c.SaveInboxCursor(e.ctx, "orders", "rabbitmq:q", 42))
	noErr(t, "SaveInboxCursor", c.SaveInboxCursor(e.ctx, "billing", "rabbitmq:q", 7))
	noErr(t, "SaveInboxCursor", c.SaveInboxCursor(e.ctx, "orders", "rabbitmq:\t\u2028 other", 1<<62))
	next, ok := cursor("orders", "rabbitmq:q")
	eq(t, "orders' cursor saved", ok, true)
	eq(t, "orders' cursor", next, int64(42))
	next, _ = cursor("billing", "rabbitmq:q")
	eq(t, "billing's cursor", next, int64(7))
	next, _ = cursor("orders", "rabbitmq:\t\u2028 other")
	eq(t, "a large position", next, int64(1<<62))
	noErr(t, "SaveInboxCursor back", c.SaveInboxCursor(e.ctx, "orders", "rabbitmq:q", 3))
	next, _ = cursor("orders", "rabbitmq:q")
	eq(t, "a cursor moved back", next, int64(3))
	if err := c.SaveInboxCursor(e.ctx, "orders", "rabbitmq:q", -1); err == nil {
		t.Error("a negative position was saved")
	}
	next, _ = cursor("orders", "rabbitmq:q")
	eq(t, "after a refused save", next, int64(3))
}

// begin begins a transaction and makes sure it ends with the test.
func (e *env) begin(in store.Inbox) store.Tx {
	e.t.Helper()
	tx, err := in.BeginTx(e.ctx)
	noErr(e.t, "BeginTx", err)
	e.t.Cleanup(func() { _ = tx.Rollback(e.ctx) })
	return tx
}

// business creates the test's business table inside tx and adds a row.
func (e *env) business(tx store.Tx) {
	e.t.Helper()
	_, err := tx.Exec(e.ctx, `CREATE TABLE IF NOT EXISTS inbox_business (n integer)`)
	noErr(e.t, "create business table", err)
	n, err := tx.Exec(e.ctx, `INSERT INTO inbox_business (n) VALUES (1)`)
	noErr(e.t, "business write", err)
	eq(e.t, "rows inserted", n, int64(1))
}

// businessRows counts the business rows, in a transaction of its own.
func (e *env) businessRows(in store.Inbox) int {
	e.t.Helper()
	tx := e.begin(in)
	defer tx.Rollback(e.ctx)
	_, err := tx.Exec(e.ctx, `CREATE TABLE IF NOT EXISTS inbox_business (n integer)`)
	noErr(e.t, "create business table", err)
	var n int
	noErr(e.t, "count business rows", tx.QueryRow(e.ctx, `SELECT count(*) FROM inbox_business`).Scan(&n))
	return n
}

func testCompleteCommits(t *testing.T, h Harness) {
	e, in := inboxEnv(t, h)
	m := received("order.created", "o-1")
	e.receive(in, "orders", "m-1", m)
	e.claimExactly("i1", 1, m)

	tx := e.begin(in)
	e.business(tx)
	out := &outbox.Message{Destination: "billing", Type: "invoice.requested"}
	noErr(t, "Enqueue in tx", tx.Enqueue(e.ctx, out))
	noErr(t, "Complete", tx.Complete(e.ctx, m.ID, "i1"))
	if tx.Driver() == nil {
		t.Fatal("Driver() = nil")
	}
	noErr(t, "Commit", tx.Commit(e.ctx))
	noErr(t, "Rollback after Commit", tx.Rollback(e.ctx))

	e.mustBeGone(m.ID)
	eq(t, "business rows", e.businessRows(in), 1)
	eq(t, "enqueued message's destination", e.get(out.ID).Destination, "billing")
	// The relay records its own completion afterwards: nothing changes.
	e.complete("i1", outbox.StatusPublished, m.ID)
	e.mustBeGone(m.ID)
	sameIDs(t, "claimed after", e.claim("i1", 10), out)
}

func testCompleteRolledBack(t *testing.T, h Harness) {
	e, in := inboxEnv(t, h)
	m := received("order.created", "o-1")
	e.receive(in, "orders", "m-1", m)
	e.claimExactly("i1", 1, m)

	tx := e.begin(in)
	e.business(tx)
	out := &outbox.Message{Destination: "billing", Type: "invoice.requested"}
	noErr(t, "Enqueue in tx", tx.Enqueue(e.ctx, out))
	noErr(t, "Complete", tx.Complete(e.ctx, m.ID, "i1"))
	noErr(t, "Rollback", tx.Rollback(e.ctx))

	got := e.get(m.ID)
	eq(t, "lease holder after rollback", got.InstanceID, "i1")
	eq(t, "status after rollback", got.Status, outbox.StatusStored)
	e.mustBeGone(out.ID)
	eq(t, "business rows", e.businessRows(in), 0)
}

func testCompleteLeaseLost(t *testing.T, h Harness) {
	e, in := inboxEnv(t, h)
	m := received("order.created", "o-1")
	e.receive(in, "orders", "m-1", m)

	// Never claimed.
	tx := e.begin(in)
	isErr(t, "Complete of an unclaimed message", tx.Complete(e.ctx, m.ID, "i1"), store.ErrLeaseLost)
	noErr(t, "Rollback", tx.Rollback(e.ctx))

	// Claimed by i1, lease expired, taken by i2.
	e.claimExactly("i1", 1, m)
	e.clk.Advance(31 * time.Second)
	e.claimExactly("i2", 1, m)
	tx = e.begin(in)
	isErr(t, "Complete by the old holder", tx.Complete(e.ctx, m.ID, "i1"), store.ErrLeaseLost)
	noErr(t, "Rollback", tx.Rollback(e.ctx))
	eq(t, "lease holder", e.get(m.ID).InstanceID, "i2")

	// Dead-lettered by an operator while i2 held it.
	noErr(t, "DeadLetter", e.s.DeadLetter(e.ctx, m.ID, "operator"))
	tx = e.begin(in)
	isErr(t, "Complete after a manual dead-letter", tx.Complete(e.ctx, m.ID, "i2"), store.ErrLeaseLost)
	noErr(t, "Rollback", tx.Rollback(e.ctx))
	if e.get(m.ID).DeadLetteredAt.IsZero() {
		t.Fatal("message no longer dead-lettered")
	}
}

func testCompleteTwice(t *testing.T, h Harness) {
	e, in := inboxEnv(t, h)
	n := received("order.paid", "o-2")
	e.receive(in, "orders", "m-2", n)
	e.claimExactly("i3", 1, n)
	tx := e.begin(in)
	noErr(t, "first Complete", tx.Complete(e.ctx, n.ID, "i3"))
	isErr(t, "second Complete", tx.Complete(e.ctx, n.ID, "i3"), store.ErrLeaseLost)
}

func testCompleteRetention(t *testing.T, h Harness) {
	e, in := inboxEnv(t, h, func(c *store.Config) { c.Retention = time.Hour })
	m := received("order.created", "o-1")
	e.receive(in, "orders", "m-1", m)
	e.claimExactly("i1", 1, m)
	tx := e.begin(in)
	noErr(t, "Complete", tx.Complete(e.ctx, m.ID, "i1"))
	noErr(t, "Commit", tx.Commit(e.ctx))
	got := e.get(m.ID)
	if !got.Status.Has(outbox.StatusPublished) || got.InstanceID != "" {
		t.Fatalf("after Complete: status %v, lease %q; want Published, no lease", got.Status, got.InstanceID)
	}
	e.complete("i1", outbox.StatusPublished, m.ID)
	eq(t, "claimable after", len(e.claim("i1", 10)), 0)
	e.clk.Advance(time.Hour)
	n, err := e.s.Sweep(e.ctx)
	noErr(t, "Sweep", err)
	eq(t, "swept", n, 1)
}
