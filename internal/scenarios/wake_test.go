package scenarios

import (
	"fmt"
	"slices"
	"testing"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/relay"
)

// TestWritersWakeAWaitingRelayOnly: an idle relay registers as waiting
// (store.WakeGate) and a writer's commit wakes it, with no poll (the fake
// clock never moves) and no kick from the test; while a burst keeps its
// claims full it leaves the waiters, so writers stop notifying (on
// PostgreSQL a NOTIFY makes committing writers queue for each other);
// idle again, it registers again and the next writer wakes it.
func TestWritersWakeAWaitingRelayOnly(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		h := e.newHook()
		rn := e.start("relay-1", relay.Config{
			Destinations: map[string]relay.Destination{dest: {Transport: h.transport("relay-1", false)}},
			Workers:      4, BatchSize: 16,
		})
		// untilWoken waits, without kicking the relay, for cond.
		untilWoken := func(what string, cond func() bool) {
			t.Helper()
			for {
				ch := e.changed.next()
				if cond() {
					return
				}
				select {
				case <-ch:
				case <-e.ctx.Done():
					t.Fatalf("waiting for %s (no poll, no kick): %v", what, e.ctx.Err())
				}
			}
		}
		registered := func() bool {
			w := rn.hs.waitings()
			return len(w) > 0 && w[len(w)-1]
		}
		deliveredAll := func(n int) func() bool { return func() bool { return len(h.delivered()) >= n } }

		untilWoken("the idle relay to register as waiting", registered)
		e.enqueue(&outbox.Message{Destination: dest, Stream: "a", Type: "test.event", Payload: []byte("first")})
		untilWoken("the first message, woken by its writer", deliveredAll(1))

		var burst []*outbox.Message
		for i := range 64 {
			burst = append(burst, &outbox.Message{Destination: dest, Type: "test.event", Payload: []byte(fmt.Sprintf("burst-%d", i))})
		}
		e.enqueue(burst...)
		untilWoken("the burst", deliveredAll(65))
		untilWoken("the relay to register again", registered)
		if w := rn.hs.waitings(); !slices.Contains(w, false) {
			t.Fatalf("registrations %v: the relay never left the waiters while its claims were full", w)
		}

		e.enqueue(&outbox.Message{Destination: dest, Stream: "a", Type: "test.event", Payload: []byte("after")})
		untilWoken("the message after the burst, woken by its writer", deliveredAll(66))
		if got := h.delivered(); got[0] != "first" || got[65] != "after" {
			t.Fatalf("delivered %v", got)
		}
	})
}
