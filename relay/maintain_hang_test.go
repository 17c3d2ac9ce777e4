package relay

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop/store/sqlite"
)

// hangingCount is a store whose PendingByDestination waits until its call
// ends, as on a connection that stopped answering (a partition).
type hangingCount struct {
	*sqlite.Store
	called chan struct{}
	once   sync.Once
}

func (h *hangingCount) PendingByDestination(ctx context.Context) (map[string]int, error) {
	h.once.Do(func() { close(h.called) })
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestStopEndsAMaintenanceCallThatHangs: a relay stopped while its
// maintainer's store call hangs returns. The call had no deadline and
// Run waits for the maintainer: a SIGTERMed serve behind a partition from
// PostgreSQL never exited.
func TestStopEndsAMaintenanceCallThatHangs(t *testing.T) {
	e := newEnv(t)
	h := &hangingCount{Store: e.s, called: make(chan struct{})}
	r, err := New(h, e.config(map[string]Destination{"d": {Transport: (&recorder{}).transport()}}))
	if err != nil {
		t.Fatal(err)
	}
	rn := e.run(r)
	if err := r.maint.parked.wait(e.ctx, 0); err != nil { // its first turn is over
		t.Fatal(err)
	}
	e.clk.Advance(r.heartbeatEvery()) // the second turn counts pending messages
	select {
	case <-h.called:
	case <-e.ctx.Done():
		t.Fatal("the maintainer never counted")
	}
	if err := rn.stop(); err != nil {
		t.Logf("Run: %v", err)
	}
}

// TestStoreDownKeepsTheErrorBackOff: with deliveries in flight and their
// renewal due, a failed store call keeps its back-off. The renewal's time
// only moves when a call succeeds, so while the store was down every wait
// was zero: the claimer spun at full CPU, logging a thousand lines a
// second. When the store answers, the renewal shortens the wait again.
func TestStoreDownKeepsTheErrorBackOff(t *testing.T) {
	e := newEnv(t)
	r := e.newRelay(e.config(map[string]Destination{"d": {Transport: (&recorder{}).transport()}}))
	l := newLoop(r)
	m := msg("d", "s", 1)
	r.fl.mu.Lock()
	r.fl.add(&flight{m: m, until: e.clk.Now().Add(time.Minute)})
	r.fl.mu.Unlock()
	l.lastRenew = e.clk.Now().Add(-2 * l.renewEvery) // the renewal is overdue
	l.failing = true
	if got := l.shortened(5 * time.Second); got != 5*time.Second {
		t.Errorf("wait after a failed call with a renewal due: %v, want the back-off (5s)", got)
	}
	l.failing = false
	if got := l.shortened(5 * time.Second); got != 0 {
		t.Errorf("wait after a call that succeeded with a renewal due: %v, want 0 (renew now)", got)
	}
}
