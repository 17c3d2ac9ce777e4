package relay

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
)

// downFor is a fault blamed on the destination, as a 503 is.
func downFor(what string) error {
	return errorhandling.WithBlame(errorhandling.Transient(errors.New(what)), errorhandling.BlameDestination)
}

// TestMessageSingledOutIsChargedAndParked: a message the destination
// always fails (a receiver that crashes on its payload and answers 500)
// while it delivers every other message was retried uncharged for ever,
// about once a second (the destination's back-off, reset by every other
// success), and held its strict stream for good, with nothing in the
// dead-letter queue and nothing above DEBUG in the log. Such faults are
// now the message's once it has been singled out (Destination.SingledOutAfter
// of them, the destination delivering others meanwhile): it backs off on
// its own, each further fault is charged as an attempt, and it ends in the
// dead-letter queue saying why. A destination down for everything is
// never charged, however long (the second half).
func TestMessageSingledOutIsChargedAndParked(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	poison := msg("api", "p", 1)
	e.enqueue(poison)
	var down atomic.Bool
	rec := &recorder{fn: func(_ context.Context, m *outbox.Message, _ int) error {
		if down.Load() || string(m.Payload) == string(poison.Payload) {
			return downFor("500 Internal Server Error")
		}
		return nil
	}}
	rn := e.start(e.config(map[string]Destination{"api": {Transport: rec.transport(), SingledOutAfter: 2 * time.Minute}}))
	rn.settle()

	// Steady traffic the destination takes, a message every 30 s beside
	// the one it keeps failing, for up to an hour.
	for i := 0; i < 120 && len(e.deadLetters()) == 0; i++ {
		e.enqueue(msg("api", "ok", i))
		rn.advance(30 * time.Second)
	}
	tries := rec.count(string(poison.Payload))
	dl := e.deadLetters()
	if len(dl) != 1 || dl[0].MessageID != poison.ID.String() {
		t.Fatalf("dead letters after an hour: %+v (the singled-out message was tried %d times), want the singled-out message", dl, tries)
	}
	if !strings.Contains(dl[0].ErrorMessage, "singled out") {
		t.Errorf("dead letter's error %q does not say the message was singled out", dl[0].ErrorMessage)
	}
	// Its own back-off (1 s doubling to 5 min), then the policy's 3
	// attempts: not a try at every step.
	if tries > 12 {
		t.Errorf("the singled-out message was tried %d times before it was parked, want its own back-off", tries)
	}
	if len(e.logs.find("message singled out")) == 0 {
		t.Error("no WARN said the message was singled out")
	}

	// The destination down for everything for 30 min, 15 times
	// SingledOutAfter: nothing is charged, nothing parked.
	down.Store(true)
	outage := msg("api", "o", 1)
	e.enqueue(outage)
	for i := 0; i < 20; i++ {
		rn.advance(90 * time.Second)
	}
	if got := e.get(outage.ID); got == nil || got.Attempts != 0 || !got.DeadLetteredAt.IsZero() {
		t.Fatalf("after a 30 min outage: %+v, want waiting, uncharged", got)
	}
	if n := len(e.deadLetters()); n != 1 {
		t.Fatalf("%d dead letters after the outage, want the one from before", n)
	}
	down.Store(false)
	rn.advance(time.Minute)
	if e.get(outage.ID) != nil {
		t.Fatal("not delivered once the destination came back")
	}
}
