package rabbitmq_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop/errorhandling"
)

// A broker that stops reading (an alarm blocks publishers) must not wedge
// the transport: every Deliver returns, as a timeout of the destination,
// whether it was opening a channel, writing a large message or waiting for
// its confirm, and with a context that has no deadline; once the broker
// reads again the transport delivers; and Close returns during an alarm. Before, a Deliver
// opening a channel held the transport's lock for as long as the broker
// did not read, and every other Deliver and Close waited behind it; and a
// write blocked in the library ignored the Deliver's timeout.
func TestBrokerThatStopsReadingDoesNotWedgeTheTransport(t *testing.T) {
	tr, p := proxiedTransport(t)
	// Warm channels, so that some calls write at once and others must
	// open a channel.
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if err := tr.Deliver(ctxFor(t), message(t)); err != nil {
				t.Errorf("Deliver before the alarm: %v", err)
			}
		})
	}
	wg.Wait()

	p.stall()
	const n = 8
	errs := make(chan error, n)
	for i := range n {
		go func() {
			m := message(t)
			if i%2 == 0 {
				m.Payload = make([]byte, 1<<20) // more than the socket buffers take
			}
			errs <- tr.Deliver(context.Background(), m)
		}()
	}
	hang := time.After(30 * time.Second) // far past Timeout: only a hang reaches it
	for i := range n {
		select {
		case err := <-errs:
			wantFault(t, err, errorhandling.ClassTransient, errorhandling.BlameDestination, "")
		case <-hang:
			t.Fatalf("%d of %d Deliver calls still running 30 s into the alarm (Timeout 1 s)", n-i, n)
		}
	}
	p.unstall()
	if err := tr.Deliver(ctxFor(t), message(t)); err != nil {
		t.Fatalf("Deliver once the broker reads again: %v", err)
	}
	p.stall()
	go func() { _ = tr.Deliver(context.Background(), message(t)) }()
	closed := make(chan error, 1)
	go func() { closed <- tr.Close() }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close still running 30 s into the alarm (Timeout 1 s)")
	}
}
