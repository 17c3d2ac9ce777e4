package relay

import (
	"context"
	"sync"
	"testing"

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
