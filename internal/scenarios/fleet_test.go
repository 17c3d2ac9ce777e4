package scenarios

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/backstophq/backstop/circuitbreaker"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/relay"
	"github.com/backstophq/backstop/retry"
	"github.com/backstophq/backstop/store"
)

// fleetStore is a hooked store that passes the store's store.Fleet
// methods through, so that the relays on it act as a fleet.
type fleetStore struct {
	*hookedStore
	killableFleet
}

// killableFleet is a store.Fleet whose heart-beats and leadership calls
// fail once the relay's hooked store is killed: its process is gone.
type killableFleet struct {
	store.Fleet
	hs *hookedStore
}

func (k killableFleet) Heartbeat(ctx context.Context, in store.Instance) error {
	if k.hs.killed() {
		return errKilled
	}
	return k.Fleet.Heartbeat(ctx, in)
}

func (k killableFleet) AcquireLeadership(ctx context.Context, instance string, ttl time.Duration) (bool, error) {
	if k.hs.killed() {
		return false, errKilled
	}
	return k.Fleet.AcquireLeadership(ctx, instance, ttl)
}

func (k killableFleet) ResignLeadership(ctx context.Context, instance string) error {
	if k.hs.killed() {
		return errKilled
	}
	return k.Fleet.ResignLeadership(ctx, instance)
}

// startFleet is start for a relay of a fleet.
func (e *env) startFleet(id string, cfg relay.Config) *runner {
	e.t.Helper()
	f, ok := e.s.(store.Fleet)
	if !ok {
		e.t.Fatalf("%T does not implement store.Fleet", e.s)
	}
	hs := newHookedStore(e.s, e.clk, e.changed)
	cfg.Instance.ID = id
	cfg.Clock = e.clk
	if cfg.PollInterval == 0 {
		cfg.PollInterval, cfg.MaxPollInterval = time.Second, 5*time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	r, err := relay.New(&fleetStore{hookedStore: hs, killableFleet: killableFleet{Fleet: f, hs: hs}}, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rn := &runner{e: e, id: id, r: r, hs: hs, cancel: cancel, done: make(chan error, 1)}
	go func() { rn.done <- r.Run(ctx) }()
	e.mu.Lock()
	e.running = append(e.running, rn)
	e.mu.Unlock()
	e.t.Cleanup(func() {
		if err := rn.stop(); err != nil && !hs.killed() {
			e.t.Errorf("relay %s: Run = %v", id, err)
		}
	})
	return rn
}

// TestFleetProbesOnceAndResumesTogether: three relays share one store and
// a webhook that answers 503. Once one relay's breaker opens the
// destination's circuit, all three stop claiming for it, and the fleet
// sends one probe per probe interval (1 s, then 2 s, 4 s, 5 s, ...),
// whichever relay sends it. When the webhook recovers, the probe that
// succeeds closes the circuit for all: every message is delivered within
// 5 s and every relay's circuit is closed.
func TestFleetProbesOnceAndResumesTogether(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		h := e.newHook()
		h.setPhase(always(reply{status: http.StatusServiceUnavailable, body: "down"}))
		var all [][]*outbox.Message
		for i := range 6 {
			all = append(all, stream(fmt.Sprintf("s%d", i), 3))
		}
		msgs := interleave(all...)
		e.enqueue(msgs...)
		var rns []*runner
		for i := range 3 {
			id := fmt.Sprintf("relay-%d", i+1)
			rns = append(rns, e.startFleet(id, relay.Config{
				Destinations: map[string]relay.Destination{dest: {
					Transport: h.transport(id, false),
					InProcess: retry.NewConfig(1, nil),
					Breaker:   &circuitbreaker.Config{MaxFailures: 3},
				}},
				Workers: 2,
			}))
		}
		allOpen := func() bool {
			for _, rn := range rns {
				if rn.r.Stats().Destinations[dest].Breaker == circuitbreaker.StateClosed {
					return false
				}
			}
			return true
		}
		// The first relay to trip opens the circuit for the fleet; the
		// others read it within a poll interval.
		e.waitFor("a circuit to open", func() bool {
			for _, rn := range rns {
				if rn.r.Stats().Destinations[dest].Breaker != circuitbreaker.StateClosed {
					return true
				}
			}
			return false
		})
		e.settle()
		e.advance(time.Second)
		e.settle()
		if !allOpen() {
			t.Fatal("a relay still claims for a destination the fleet found down")
		}

		// 24 s of outage in steps of a quarter second: never two probes in
		// one step, and no more than the fleet's schedule allows.
		probesAt := map[string]int{}
		before := len(h.requests())
		for step := 0; step < 96; step++ {
			n := len(h.requests())
			e.advance(250 * time.Millisecond)
			e.settle()
			got := h.requests()
			if len(got)-n > 1 {
				t.Fatalf("step %d: %d requests in a quarter second: the fleet probed more than once", step, len(got)-n)
			}
			for _, rq := range got[n:] {
				probesAt[rq.relay]++
			}
		}
		probes := len(h.requests()) - before
		// Probes due 1, 3, 7, 12, 17, 22, ... s after the opening: from
		// 1 s on, at most 5 in the next 24 s.
		if probes < 3 || probes > 5 {
			t.Fatalf("%d probes in 24 s of outage, want 3 to 5 (one per interval for the fleet); by relay %v", probes, probesAt)
		}
		if len(e.deadLetters()) != 0 {
			t.Fatal("the outage dead-lettered messages")
		}

		// Recovery: every message within 5 s, every circuit closed.
		h.setPhase(nil)
		for s := 0; !e.gone(msgs...); s++ {
			if s == 20 {
				t.Fatalf("not delivered 5 s after the webhook came back: %d of %d", len(h.delivered()), len(msgs))
			}
			e.advance(250 * time.Millisecond)
			e.settle()
		}
		e.advance(time.Second) // a poll interval: every relay reads the closed circuit
		e.settle()
		for _, rn := range rns {
			if st := rn.r.Stats().Destinations[dest].Breaker; st != circuitbreaker.StateClosed {
				t.Fatalf("%s's circuit is %v after the recovery", rn.id, st)
			}
		}
		t.Logf("%d probes in 24 s, by relay %v", probes, probesAt)
	})
}

// TestLeaderFailover: of three relays of a fleet one leads its
// maintenance; when it dies (its store calls fail, it never resigns),
// another takes over once its leadership lapses.
func TestLeaderFailover(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b)
		h := e.newHook()
		var rns []*runner
		for i := range 3 {
			id := fmt.Sprintf("relay-%d", i+1)
			rns = append(rns, e.startFleet(id, relay.Config{
				Destinations: map[string]relay.Destination{dest: {Transport: h.transport(id, false)}},
				Workers:      1,
			}))
		}
		leaders := func() []*runner {
			var out []*runner
			for _, rn := range rns {
				if rn.r.Stats().Leader {
					out = append(out, rn)
				}
			}
			return out
		}
		e.waitFor("a leader", func() bool { return len(leaders()) == 1 })
		first := leaders()[0]

		// The leader dies without resigning: its store calls fail from
		// now on, as if the process were gone.
		first.hs.kill()
		e.mu.Lock() // no more kicks for a dead process
		for i, rn := range e.running {
			if rn == first {
				e.running = append(e.running[:i], e.running[i+1:]...)
				break
			}
		}
		e.mu.Unlock()
		var rest []*runner
		for _, rn := range rns {
			if rn != first {
				rest = append(rest, rn)
			}
		}
		// Its leadership lapses after half the instance timeout (30 s);
		// the others heart-beat every 15 s and one takes over.
		for i := 0; i < 8; i++ {
			e.advance(5 * time.Second)
			for _, rn := range rest {
				rn.settle()
			}
		}
		e.waitFor("another leader", func() bool {
			n := 0
			for _, rn := range rest {
				if rn.r.Stats().Leader {
					n++
				}
			}
			return n == 1
		})
	})
}
