package relay

import (
	"context"
	"testing"

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
