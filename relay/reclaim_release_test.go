package relay

import (
	"context"
	"testing"
	"time"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/transport"
)

// TestClaimAfterAReleaseCommittedDeliversIt: a message this relay gave
// back (released, its outcome reported) and that a claim returns while the
// relay's own lease on it was sure to hold was let go by the store first:
// the claim's lease is a new one of the relay's own. Once the release is
// recorded the message is delivered under that lease. It was given back
// again, a release that the next overlapping claim took again in turn: on
// SQLite, where the store's writes take the writer in the order they ask,
// a claim waiting behind the release's record always did, and the relay
// gave the message back hundreds of times without delivering it
// (TestStallIsNotBlamedOnTheDestination under load).
func TestClaimAfterAReleaseCommittedDeliversIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := msg("orders", "s", 1)
	e.enqueue(m)
	r, err := New(e.s, e.config(map[string]Destination{"orders": {
		Transport: transport.Func(func(context.Context, *outbox.Message) error { return nil })}}))
	if err != nil {
		t.Fatal(err)
	}
	d := r.dests["orders"]
	now := e.clk.Now()
	// in flight here, its release reported, the relay's lease good for a
	// minute
	r.fl.add(&flight{m: m, dest: d, until: now.Add(time.Minute), reported: true, started: true})
	// a claim returns it: the release had committed
	again := *m
	again.LeaseExpiry = now.Add(30 * time.Second)
	(&loop{r: r}).dispatch([]*outbox.Message{&again}, false, now, now)
	// the release is recorded
	r.endFlights([]outcome{{m: m, dest: d, kind: released, cause: causeStall}})

	if n := len(r.outcomes); n != 0 {
		t.Fatalf("%d outcomes queued (%+v): the new lease was given back, want the message delivered under it", n, r.outcomes[0])
	}
	if q := r.sched.queues[d]; len(q) != 1 || q[0].msgs[0].ID != m.ID {
		t.Fatalf("queued for delivery: %+v, want the message", q)
	}
	f := r.fl.m[m.ID]
	if f == nil || f.reported || f.started || f.reclaimed {
		t.Fatalf("flight = %+v, want held for a new delivery", f)
	}

	// A claim that takes it back while the relay's lease could have
	// lapsed (a lapsed lease renewed) still gives the new lease back once
	// the flight's outcome is recorded.
	f.reported = true
	f.until = now.Add(-time.Second)
	(&loop{r: r}).dispatch([]*outbox.Message{&again}, false, now, now)
	r.endFlights([]outcome{{m: m, dest: d, kind: released, cause: causeStall}})
	if n := len(r.outcomes); n != 1 || r.outcomes[0].cause != causeReclaimed {
		t.Fatalf("outcomes %+v, want the lapsed lease's renewal given back", r.outcomes)
	}
}
