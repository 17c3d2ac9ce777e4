package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// RunAdmin runs the conformance tests of store.Admin against the stores h
// opens, which must implement it.
func RunAdmin(t *testing.T, h Harness) {
	for _, tc := range adminCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, h)
		})
	}
}

var adminCases = []testCase{
	{"IdempotentEnqueue", testIdempotentEnqueue},
	{"IdempotentEnqueueConcurrent", testIdempotentConcurrent},
	{"ListMessages", testListMessages},
	{"Cancel", testCancel},
	{"Audit", testAudit},
}

func adminOf(t *testing.T, e *env) store.Admin {
	t.Helper()
	a, ok := e.s.(store.Admin)
	if !ok {
		t.Fatalf("%T does not implement store.Admin", e.s)
	}
	return a
}

func testIdempotentEnqueue(t *testing.T, h Harness) {
	e := newEnv(t, h)
	a := adminOf(t, e)
	first := []*outbox.Message{msg("billing", "s"), msg("audit", "s")}
	ids, created, err := a.EnqueueIdempotent(e.ctx, "order-42-created", first...)
	if err != nil || !created || len(ids) != 2 || ids[0] != first[0].ID || ids[1] != first[1].ID {
		t.Fatalf("first: ids %v created %v err %v", ids, created, err)
	}
	again := []*outbox.Message{msg("billing", "s")}
	ids2, created, err := a.EnqueueIdempotent(e.ctx, "order-42-created", again...)
	if err != nil || created || len(ids2) != 2 || ids2[0] != ids[0] || ids2[1] != ids[1] {
		t.Fatalf("duplicate: ids %v created %v err %v, want the first ids %v", ids2, created, err, ids)
	}
	if _, err := e.s.Get(e.ctx, again[0].ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the duplicate's message was written: %v", err)
	}
	all, err := a.ListMessages(e.ctx, store.MessageFilter{})
	if err != nil || len(all) != 2 {
		t.Fatalf("messages after a duplicate: %d, %v", len(all), err)
	}
	// A key survives its messages' delivery.
	e.complete("i1", outbox.StatusPublished, e.claimIDs("i1", 10)...)
	ids3, created, err := a.EnqueueIdempotent(e.ctx, "order-42-created", msg("billing", "s"))
	if err != nil || created || ids3[0] != ids[0] {
		t.Errorf("after delivery: ids %v created %v err %v", ids3, created, err)
	}
	// A bad message writes nothing, not even the key.
	bad := msg("", "s")
	if _, _, err := a.EnqueueIdempotent(e.ctx, "k2", bad); err == nil {
		t.Fatal("an invalid message was accepted")
	}
	if _, created, err := a.EnqueueIdempotent(e.ctx, "k2", msg("billing", "")); err != nil || !created {
		t.Errorf("the key of a refused enqueue was kept: created %v err %v", created, err)
	}
	// Keys are compared exactly, whatever they hold.
	for _, k := range []string{"K2", "k2 ", "ключ\u00a02", "k\x7f2"} {
		if _, created, err := a.EnqueueIdempotent(e.ctx, k, msg("billing", "")); err != nil || !created {
			t.Errorf("key %q: created %v err %v", k, created, err)
		}
	}
}

func (e *env) claimIDs(instance string, n int) []uuid.UUID {
	return ids(e.claim(instance, n)...)
}

func testIdempotentConcurrent(t *testing.T, h Harness) {
	e := newEnv(t, h)
	a := adminOf(t, e)
	const n = 8
	var wg sync.WaitGroup
	results := make([][]uuid.UUID, n)
	createdCount := make([]bool, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], createdCount[i], errs[i] = a.EnqueueIdempotent(e.ctx, "same", msg("billing", "s"))
		}()
	}
	wg.Wait()
	created := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("call %d: %v", i, errs[i])
		}
		if createdCount[i] {
			created++
		}
		if results[i][0] != results[0][0] {
			t.Errorf("call %d got id %s, call 0 %s", i, results[i][0], results[0][0])
		}
	}
	all, _ := a.ListMessages(e.ctx, store.MessageFilter{})
	if created != 1 || len(all) != 1 {
		t.Errorf("%d calls created, %d messages written; want 1 and 1", created, len(all))
	}
}

func testListMessages(t *testing.T, h Harness) {
	e := newEnv(t, h)
	a := adminOf(t, e)
	var all []*outbox.Message
	for i := range 5 {
		all = append(all, e.enqueue(msg("billing", fmt.Sprint("s", i%2)))...)
	}
	other := e.enqueue(&outbox.Message{Destination: "audit", Stream: "s0", Type: "other.kind"})[0]
	list := func(f store.MessageFilter) []*outbox.Message {
		t.Helper()
		got, err := a.ListMessages(e.ctx, f)
		if err != nil {
			t.Fatalf("ListMessages(%+v): %v", f, err)
		}
		return got
	}
	sameIDs(t, "all", list(store.MessageFilter{}), append(all, other)...)
	sameIDs(t, "billing", list(store.MessageFilter{Destination: "billing"}), all...)
	sameIDs(t, "stream s1", list(store.MessageFilter{Destination: "billing", Stream: "s1"}), all[1], all[3])
	sameIDs(t, "type", list(store.MessageFilter{Type: "other.kind"}), other)
	// Pages by cursor.
	p1 := list(store.MessageFilter{Limit: 4})
	sameIDs(t, "page 1", p1, all[:4]...)
	sameIDs(t, "page 2", list(store.MessageFilter{Limit: 4, AfterSeq: p1[3].Seq}), all[4], other)
	// States.
	claimed := e.claim("i1", 1)[0] // all[0]
	sameIDs(t, "leased", list(store.MessageFilter{State: store.StateLeased}), claimed)
	e.fail("i1", store.Failure{ID: claimed.ID, Error: "boom"})
	sameIDs(t, "retrying", list(store.MessageFilter{State: store.StateRetrying}), claimed)
	sameIDs(t, "ready", list(store.MessageFilter{State: store.StateReady, Destination: "billing"}), all[1:]...)
	if err := e.s.DeadLetter(e.ctx, all[4].ID, "by hand"); err != nil {
		t.Fatal(err)
	}
	sameIDs(t, "dead-lettered", list(store.MessageFilter{State: store.StateDeadLettered}), all[4])
	if _, err := a.ListMessages(e.ctx, store.MessageFilter{State: "bogus"}); err == nil {
		t.Error("an unknown state was accepted")
	}
	if got := list(store.MessageFilter{Stream: "nope\x00'; DROP TABLE x; --"}); len(got) != 0 {
		t.Errorf("odd filter matched %d", len(got))
	}
}

func testCancel(t *testing.T, h Harness) {
	e := newEnv(t, h)
	a := adminOf(t, e)
	ms := e.enqueue(msgs(3, "billing", "s")...)
	held := e.claim("i1", 1)[0]
	if err := a.Cancel(e.ctx, held.ID); !errors.Is(err, store.ErrLeased) {
		t.Errorf("cancel of a leased message: %v, want ErrLeased", err)
	}
	if err := a.Cancel(e.ctx, ms[2].ID); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	e.mustBeGone(ms[2].ID)
	if err := a.Cancel(e.ctx, ms[2].ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second cancel: %v, want ErrNotFound", err)
	}
	if err := a.Cancel(e.ctx, uuid.New()); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("cancel of an unknown id: %v", err)
	}
	// A dead-lettered message is refused: its pending entry would bring it
	// back on replay (behind the stream's later messages).
	if err := e.s.DeadLetter(e.ctx, ms[1].ID, "by hand"); err != nil {
		t.Fatal(err)
	}
	if err := a.Cancel(e.ctx, ms[1].ID); !errors.Is(err, store.ErrDeadLettered) {
		t.Errorf("cancel of a dead-lettered message: %v, want ErrDeadLettered", err)
	}
	if _, err := e.s.Get(e.ctx, ms[1].ID); err != nil {
		t.Errorf("the refused cancel took the message: %v", err)
	}
	// The lease lapses: now it can be cancelled.
	e.clk.Advance(31 * time.Second)
	if err := a.Cancel(e.ctx, held.ID); err != nil {
		t.Errorf("cancel after the lease lapsed: %v", err)
	}
}

func testAudit(t *testing.T, h Harness) {
	e := newEnv(t, h)
	a := adminOf(t, e)
	recs := []*store.AuditRecord{
		{Actor: "ops", Action: "replay", Target: "entry-1", Notes: "fixed the key"},
		{Actor: "ops", Action: "replay", Filter: `{"destination":"billing"}`, Count: 1200},
		{Actor: "dash\x00\xff", Action: "release", Target: "billing/s", Notes: "ünïcode ✓"},
	}
	for _, r := range recs {
		if err := a.Audit(e.ctx, r); err != nil {
			t.Fatalf("Audit: %v", err)
		}
		e.clk.Advance(time.Second)
	}
	if recs[0].ID == 0 || recs[1].ID <= recs[0].ID || !recs[0].At.Equal(epoch) {
		t.Errorf("ids %d %d, at %v", recs[0].ID, recs[1].ID, recs[0].At)
	}
	got, err := a.AuditLog(e.ctx, store.AuditFilter{})
	if err != nil || len(got) != 3 || got[0].ID != recs[2].ID || got[2].Notes != "fixed the key" {
		t.Fatalf("log: %+v %v", got, err)
	}
	if got[0].Actor != "dash\uFFFD" || got[0].Notes != "ünïcode ✓" {
		t.Errorf("text not cleaned: %+q %+q", got[0].Actor, got[0].Notes)
	}
	if got[1].Count != 1200 || got[1].Filter != `{"destination":"billing"}` {
		t.Errorf("bulk record %+v", got[1])
	}
	if got, _ := a.AuditLog(e.ctx, store.AuditFilter{Target: "entry-1"}); len(got) != 1 || got[0].ID != recs[0].ID {
		t.Errorf("by target: %+v", got)
	}
	if got, _ := a.AuditLog(e.ctx, store.AuditFilter{Action: "replay", Limit: 1}); len(got) != 1 || got[0].ID != recs[1].ID {
		t.Errorf("by action, limit 1: %+v", got)
	}
	if got, _ := a.AuditLog(e.ctx, store.AuditFilter{BeforeID: recs[1].ID}); len(got) != 1 || got[0].ID != recs[0].ID {
		t.Errorf("before cursor: %+v", got)
	}
}
