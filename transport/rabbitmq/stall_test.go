package rabbitmq_test

import (
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop/errorhandling"
)

// TestConnectionGoneSilentIsDialledAgain: the transport's connection goes
// quiet both ways (writes still succeed into the socket, nothing comes
// back) while the broker itself is fine and a new connection works. The
// Deliver that publishes on it times out waiting for the confirm, a
// transient fault of the destination; the next Deliver must not use that
// connection again. Before, the confirm timeout discarded only the
// channel: the next Deliver took another warm channel of the dead
// connection (or opened one on it) and timed out too, and so did every
// Deliver after it until the heartbeat noticed (3 × 10 s).
func TestConnectionGoneSilentIsDialledAgain(t *testing.T) {
	tr, p := proxiedTransport(t)
	t.Cleanup(func() { _ = tr.Close() })
	// Warm channels: four at once leave four idle channels in the pool.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if err := tr.Deliver(ctxFor(t), message(t)); err != nil {
				t.Errorf("Deliver before the silence: %v", err)
			}
		})
	}
	wg.Wait()
	if n := p.silence(); n != 1 {
		t.Fatalf("%d connections through the proxy, want 1", n)
	}

	start := time.Now()
	err := tr.Deliver(ctxFor(t), message(t))
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("Deliver on the silent connection took %v (Timeout 1 s)", took)
	}
	wantFault(t, err, errorhandling.ClassTransient, errorhandling.BlameDestination, "timeout")

	for i := range 3 {
		start := time.Now()
		if err := tr.Deliver(ctxFor(t), message(t)); err != nil {
			t.Fatalf("Deliver %d after the confirm timeout, %v later: %v (the silent connection was used again)", i+1, time.Since(start).Round(time.Millisecond), err)
		}
	}
}
