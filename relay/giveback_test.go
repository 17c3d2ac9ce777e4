package relay

import (
	"context"
	"testing"
	"time"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/transport"
)

// TestGiveBackIsNotTakenForALapsedLease: a claim that overlaps the record
// of a release may take the message back; the relay cannot tell that
// lease from its own lapsed one renewed, so it gives it back once the
// release is recorded. That give-back goes with the loop's next store
// call, ahead of its claim: the claim that takes the messages back then
// took them after the release, and they are delivered, in order, in one
// task. Recorded on its own, the give-back was a release that the next
// overlapping claim took again: a livelock, seen under load on SQLite
// (TestStallIsNotBlamedOnTheDestination: 391 give-backs, no delivery).
func TestGiveBackIsNotTakenForALapsedLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m1, m2 := msg("orders", "s", 1), msg("orders", "s", 2)
	e.enqueue(m1, m2)
	r := e.newRelay(e.config(map[string]Destination{"orders": {
		Transport: transport.Func(func(context.Context, *outbox.Message) error { return nil })}}))
	l := newLoop(r)
	ctx := e.ctx

	if _, err := l.step(ctx, true); err != nil {
		t.Fatal(err)
	}
	task, _ := r.sched.take()
	r.sched.done(task)
	if len(task.msgs) != 2 {
		t.Fatalf("claimed %d messages, want 2", len(task.msgs))
	}
	// The delivery stalled: both are released.
	outs := []outcome{
		{m: task.msgs[0], dest: task.dest, kind: released, cause: causeStall},
		{m: task.msgs[1], dest: task.dest, kind: released, cause: causeStall},
	}
	r.report(outs...)
	outs = r.takeOutcomes(0)
	// The recorder's call commits the releases; before it settles them,
	// the loop's claim takes both back.
	res, err := r.recordCall(ctx, outs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.step(ctx, true); err != nil {
		t.Fatal(err)
	}
	if st := r.Stats(); st.Reclaimed != 2 {
		t.Fatalf("reclaimed %d, want 2", st.Reclaimed)
	}
	r.settle(outs, res)

	// Whatever is given back, each recorder call overlapped by a claim
	// again, as a writer taken in turn makes them: the messages must come
	// back for delivery within a few rounds.
	for round := 0; round < 5 && len(r.sched.queues[task.dest]) == 0; round++ {
		outs := r.takeOutcomes(0)
		if len(outs) == 0 {
			if _, err := l.step(ctx, true); err != nil {
				t.Fatal(err)
			}
			continue
		}
		res, err := r.recordCall(ctx, outs)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.step(ctx, true); err != nil {
			t.Fatal(err)
		}
		r.settle(outs, res)
	}
	if st := r.Stats(); len(r.sched.queues[task.dest]) == 0 {
		t.Fatalf("not delivered after 5 rounds (released %d, reclaimed %d): every give-back was taken again by the claim that overlapped its record", st.Released, st.Reclaimed)
	}
	if n := len(r.givenBack) + len(r.takeOutcomes(0)); n != 0 {
		t.Fatalf("%d leases still being given back, want the messages delivered under the claim's", n)
	}
	again := r.sched.queues[task.dest]
	if len(again) != 1 || len(again[0].msgs) != 2 || again[0].msgs[0].ID != m1.ID || again[0].msgs[1].ID != m2.ID {
		t.Fatalf("queued %+v, want one task of the stream's two messages in order", again)
	}
	r.fl.mu.Lock()
	for _, m := range again[0].msgs {
		if f := r.fl.m[m.ID]; f == nil || f.reported || f.reclaimed {
			t.Errorf("flight of %s = %+v, want held for its delivery", m.ID, f)
		}
	}
	r.fl.mu.Unlock()
	for _, m := range []*outbox.Message{m1, m2} {
		got := e.get(m.ID)
		if got == nil || got.LeaseExpiry.IsZero() {
			t.Fatalf("message %s = %+v, want leased for the delivery", m.ID, got)
		}
	}
}

// TestGiveBackOvertakenByAClaimEndsTheFlight: the relay's lease lapsed
// during a delivery that then stalled. A claim took the message back
// before the release was recorded, the release then cleared that new
// lease, and a claim made while the resulting give-back waited took the
// message once more. The give-back's call releases that lease too, so its
// claim takes the message fresh: it is delivered, not given back again.
// Before, each such call found the flight claimed again, gave it back
// once more, and its own claim took it again: seen under load on SQLite
// (TestStallIsNotBlamedOnTheDestination: 1,107 give-backs, no delivery).
func TestGiveBackOvertakenByAClaimEndsTheFlight(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := msg("orders", "s", 1)
	e.enqueue(m)
	cfg := e.config(map[string]Destination{"orders": {
		Transport: transport.Func(func(context.Context, *outbox.Message) error { return nil })}})
	cfg.LeaseDuration = 30 * time.Second
	r := e.newRelay(cfg)
	l := newLoop(r)
	ctx := e.ctx
	step := func() {
		t.Helper()
		if _, err := l.step(ctx, true); err != nil {
			t.Fatal(err)
		}
	}

	step()
	task, _ := r.sched.take()
	r.sched.done(task)
	// The delivery stalls past the lease; the relay releases it, and a
	// claim takes the lapsed lease before that release is recorded.
	e.clk.Advance(31 * time.Second)
	l.lastRenew = e.clk.Now() // no renewal in these calls
	r.report(outcome{m: task.msgs[0], dest: task.dest, kind: released, cause: causeStall})
	outs := r.takeOutcomes(0)
	step()
	res, err := r.recordCall(ctx, outs) // clears the claim's lease too
	if err != nil {
		t.Fatal(err)
	}
	r.settle(outs, res)
	// A claim made while the give-back waits takes the message again.
	queued := r.takeGivenBack()
	if len(queued) != 1 {
		t.Fatalf("%d give-backs queued for the loop, want 1", len(queued))
	}
	step()
	r.mu.Lock()
	r.givenBack = append(queued, r.givenBack...)
	r.mu.Unlock()

	for round := 0; round < 5 && len(r.sched.queues[task.dest]) == 0; round++ {
		step()
	}
	if st := r.Stats(); len(r.sched.queues[task.dest]) == 0 {
		t.Fatalf("not delivered after 5 calls (released %d, reclaimed %d): each gave the message back and its claim took it again", st.Released, st.Reclaimed)
	}
	if n := len(r.takeGivenBack()) + len(r.takeOutcomes(0)); n != 0 {
		t.Fatalf("%d leases still being given back", n)
	}
	if got := e.get(m.ID); got == nil || got.LeaseExpiry.IsZero() {
		t.Fatalf("message = %+v, want leased for the delivery", got)
	}
}
