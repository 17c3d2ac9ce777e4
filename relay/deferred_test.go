package relay

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/store"
)

// TestDeferredRenewalKeepsTheLeaseAsItWas: the store passed over a
// renewal because another session held the row locked
// (store.Result.Deferred). The relay still holds the lease, until the
// time it knew: not lost (the delivery would not start), and not extended
// as if renewed (it would start a delivery past the lease).
func TestDeferredRenewalKeepsTheLeaseAsItWas(t *testing.T) {
	e := newEnv(t)
	r := e.newRelay(e.config(map[string]Destination{"d": {Transport: (&recorder{}).transport()}}))
	l := newLoop(r)
	m := msg("d", "", 1)
	m.ID = uuid.New()
	until := e.clk.Now().Add(10 * time.Second)
	r.fl.mu.Lock()
	r.fl.add(&flight{m: m, dest: r.dests["d"], until: until})
	r.fl.mu.Unlock()
	e.clk.Advance(5 * time.Second)
	l.renewed([]uuid.UUID{m.ID}, &store.Result{Deferred: []uuid.UUID{m.ID}, Now: e.clk.Now()}, e.clk.Now())
	r.fl.mu.Lock()
	f := r.fl.m[m.ID]
	r.fl.mu.Unlock()
	if f.lost || !f.until.Equal(until) {
		t.Fatalf("after a deferred renewal: lost %v, until %v; want held until %v", f.lost, f.until, until)
	}
}
