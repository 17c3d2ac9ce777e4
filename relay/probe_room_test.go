package relay

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/circuitbreaker"
)

// TestDueProbeWithoutRoomDoesNotSpin: one destination's circuit is open
// and its probe due while the relay holds all it may (the other
// destination's deliveries hang). The probe cannot be claimed until a
// flight ends, which wakes the claimer; before, the due probe made every
// wait zero, and the claimer spun at full CPU for as long as the other
// destination's deliveries lasted.
func TestDueProbeWithoutRoomDoesNotSpin(t *testing.T) {
	e := newEnv(t)
	cfg := e.config(map[string]Destination{
		"down": {Transport: (&recorder{}).transport(), Breaker: &circuitbreaker.Config{MaxFailures: 1}},
		"slow": {Transport: (&recorder{}).transport()},
	})
	cfg.Workers, cfg.BatchSize = 2, 2
	cfg.NoFleet = true // the circuit is this relay's alone
	r := e.newRelay(cfg)
	l := newLoop(r)
	r.fl.mu.Lock()
	for i := range 2 {
		m := msg("slow", "", i)
		m.ID = uuid.New()
		r.fl.add(&flight{m: m, dest: r.dests["slow"], until: e.clk.Now().Add(time.Minute)})
	}
	r.fl.mu.Unlock()
	r.dests["down"].trip(e.clk.Now())
	e.clk.Advance(2 * time.Second) // the probe is due
	l.lastRenew = e.clk.Now()
	if free := l.free(); free != 0 {
		t.Fatalf("room for %d more messages; the test wants none", free)
	}
	for range 3 {
		if _, err := l.step(e.ctx, true); err != nil {
			t.Fatal(err)
		}
		if got := l.shortened(time.Second); got <= 0 {
			t.Fatalf("wait after a round that could not take the due probe for want of room: %v; want the poll interval (a flight ending wakes the claimer)", got)
		}
	}
	// Room again: the probe shortens the wait to nothing.
	r.fl.mu.Lock()
	for id, f := range r.fl.m {
		r.fl.end(id, f)
	}
	r.fl.mu.Unlock()
	if got := l.shortened(time.Second); got != 0 {
		t.Errorf("wait with room and a probe due: %v, want 0", got)
	}
}
