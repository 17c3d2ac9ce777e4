package relay

import (
	"testing"
	"time"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/store"
)

// TestForwardStoreClockStepDoesNotReapLiveInstances: the store's clock
// (the database's, on PostgreSQL) steps two minutes forward, past the
// one-minute InstanceTimeout, while another relay of the fleet is alive
// and holds a lease. Every heart-beat now looks two minutes old; the
// leader must not take the live relay for dead and free its leases at its
// next beat, which would let any relay claim what it is delivering: it
// holds off the reaping for an InstanceTimeout, in which the live
// instances heart-beat on the new clock. An instance silent after that is
// reaped.
func TestForwardStoreClockStepDoesNotReapLiveInstances(t *testing.T) {
	t.Parallel()
	storeClk := clock.NewFake(epoch)
	e := newEnv(t, func(c *store.Config) { c.Clock = storeClk })
	other := store.Instance{ID: "other"}
	m := msg("elsewhere", "s", 1) // not one of the relay's destinations: it does not claim it
	e.enqueue(m)
	if err := e.s.Heartbeat(e.ctx, other); err != nil {
		t.Fatal(err)
	}
	res, err := e.s.ProcessBatch(e.ctx, &store.Batch{Instance: other, SkipMaintenance: true,
		Claim: store.ClaimRequest{Limit: 1, Lease: time.Hour}})
	if err != nil || len(res.Claimed) != 1 {
		t.Fatalf("the other relay claimed %v, %v; want the message", res, err)
	}
	rec := &recorder{}
	rn := e.start(e.config(map[string]Destination{"orders": {Transport: rec.transport()}}))
	beat := rn.r.heartbeatEvery()
	turn(e, beat, rn)
	if !rn.r.maint.leader.Load() {
		t.Fatal("the relay does not lead its fleet")
	}

	storeClk.Advance(2 * time.Minute)
	turn(e, beat, rn)
	if got := e.get(m.ID); got.InstanceID != other.ID {
		t.Fatalf("after the store's clock stepped 2m forward, the live relay's lease is held by %q (%d dead instances logged), want %q",
			got.InstanceID, len(e.logs.find("silent relay instances declared dead")), other.ID)
	}

	// The other relay falls silent: it is reaped once the hold-off is over.
	timeout := 60 * time.Second // the store's InstanceTimeout
	for i := time.Duration(0); i < timeout+2*beat; i += beat {
		storeClk.Advance(beat)
		turn(e, beat, rn)
	}
	if got := e.get(m.ID); got.InstanceID != "" {
		t.Fatalf("a relay silent for %v after the step still holds its lease", timeout+2*beat)
	}
}

// TestForwardStoreClockStepKeepsTheRateLimitShares: two relays share a
// destination's RateLimit, and the store's clock steps two minutes
// forward. The other relay's heart-beat now looks two minutes old, and
// counted alone this relay took the whole limit until the other
// heart-beat again, the fleet sending at twice the limit: the shares stay
// as they were for the hold-off.
func TestForwardStoreClockStepKeepsTheRateLimitShares(t *testing.T) {
	t.Parallel()
	storeClk := clock.NewFake(epoch)
	e := newEnv(t, func(c *store.Config) { c.Clock = storeClk })
	if err := e.s.Heartbeat(e.ctx, store.Instance{ID: "other"}); err != nil {
		t.Fatal(err)
	}
	rn := e.start(e.config(map[string]Destination{"api": {
		Transport: (&recorder{}).transport(), RateLimit: &RateLimit{PerSecond: 10, Burst: 2},
	}}))
	share := func() int {
		l := rn.r.dests["api"].limit
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.share
	}
	beat := rn.r.heartbeatEvery()
	turn(e, beat, rn)
	if n := share(); n != 2 {
		t.Fatalf("the limit is shared among %d relays, want 2", n)
	}
	storeClk.Advance(2 * time.Minute)
	turn(e, beat, rn)
	if n := share(); n != 2 {
		t.Fatalf("after the store's clock stepped 2m forward the limit is shared among %d relays, want 2 (the other is alive)", n)
	}
}
