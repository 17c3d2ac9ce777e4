package relay

import (
	"slices"
	"testing"
	"time"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// TestNoDoubleFlightUnderASteppedStoreClock: the store's clock runs past
// the lease while the relay's does not move (the relay stalled: time
// passed for the store, so its leases lapsed), and another instance
// claims what the store now sees as free. The relay learns of it from its
// next store call (Result.Now) and does not start the message it had not
// started yet: the other instance holds it. Without Result.Now, the
// relay's own clock would have said the lease had 30 s left. A step of
// the store's clock, with no time passing, is
// TestStoreClockStepLeavesTheLeasesToTheirHolder.
func TestNoDoubleFlightUnderASteppedStoreClock(t *testing.T) {
	t.Parallel()
	sc := startSteppedClock(t)
	e, rn, rec, storeClk, first, second, proceed := sc.e, sc.rn, sc.rec, sc.storeClk, sc.first, sc.second, sc.proceed
	waiting := second
	if rec.got()[0] == string(second.Payload) {
		waiting = first
	}

	storeClk.Advance(45 * time.Second) // past the 30 s lease on the store's clock only
	res, err := e.s.ProcessBatch(e.ctx, &store.Batch{Instance: store.Instance{ID: "thief"}, Claim: store.ClaimRequest{Limit: 10}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Claimed) != 2 {
		t.Fatalf("the other instance claimed %d messages, want both", len(res.Claimed))
	}
	rounds := rn.r.rounds.Load()
	rn.waitFor("a store call after the step", func() bool { return rn.r.rounds.Load() >= rounds+2 })
	close(proceed)
	rn.waitFor("the message given back", func() bool { return rn.r.Stats().InFlight == 0 })

	if n := rec.count(string(waiting.Payload)); n != 0 {
		t.Fatalf("the message another instance holds was delivered %d times here", n)
	}
	if got := e.get(waiting.ID); got == nil || got.InstanceID != "thief" {
		t.Fatalf("the other instance's message = %+v", got)
	}
	if n := len(rec.got()); n != 1 {
		t.Fatalf("%d deliveries, want the one in progress at the step", n)
	}
}

// TestSteppedStoreClockReclaimsWithoutADoubleFlight: the store's clock
// runs past the lease while a delivery hangs, the relay's standing still,
// and nobody else is there:
// the relay's next claim takes both messages again. The one in progress
// is not delivered a second time, the other is delivered once on its new
// lease, and each is recorded once.
func TestSteppedStoreClockReclaimsWithoutADoubleFlight(t *testing.T) {
	t.Parallel()
	sc := startSteppedClock(t)
	e, rn, rec, storeClk, first, second, proceed := sc.e, sc.rn, sc.rec, sc.storeClk, sc.first, sc.second, sc.proceed
	storeClk.Advance(45 * time.Second)
	rn.waitFor("the messages claimed again", func() bool { return rn.r.Stats().Reclaimed == 2 })
	close(proceed)
	rn.settle()
	for _, m := range []*outbox.Message{first, second} {
		if n := rec.count(string(m.Payload)); n != 1 {
			t.Fatalf("%s delivered %d times", m.Payload, n)
		}
		if e.get(m.ID) != nil {
			t.Fatalf("%s not recorded delivered", m.Payload)
		}
	}
	if s := rn.r.Stats(); s.Delivered != 2 || s.InFlight != 0 {
		t.Fatalf("stats = %+v", s)
	}
}

// TestStoreClockStepLeavesTheLeasesToTheirHolder: the store's clock is
// stepped forward past the lease (NTP correcting the database host: no
// time passes) while the relay delivers one message and holds another.
// Every lease looks lapsed on the stepped clock, but another instance's
// claim takes neither: the store holds the leases for one lease (the
// lease hold), the relay renews them on the new clock and delivers each
// message once. Before the hold, the other instance took both, and the
// one in flight was sent twice.
func TestStoreClockStepLeavesTheLeasesToTheirHolder(t *testing.T) {
	t.Parallel()
	sc := startSteppedClock(t)
	e, rn, rec := sc.e, sc.rn, sc.rec
	sc.storeClk.Step(45 * time.Second)
	res, err := e.s.ProcessBatch(e.ctx, &store.Batch{Instance: store.Instance{ID: "thief"}, Claim: store.ClaimRequest{Limit: 10}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Claimed) != 0 {
		t.Fatalf("another instance claimed %d messages the relay holds", len(res.Claimed))
	}
	close(sc.proceed)
	rn.waitFor("both delivered", func() bool { return rn.r.Stats().Delivered == 2 })
	rn.settle()
	for _, m := range []*outbox.Message{sc.first, sc.second} {
		if n := rec.count(string(m.Payload)); n != 1 {
			t.Fatalf("%s delivered %d times", m.Payload, n)
		}
		if e.get(m.ID) != nil {
			t.Fatalf("%s not recorded delivered", m.Payload)
		}
	}
}

// steppedClock is a one-worker relay on a store with a clock of its own,
// holding two unordered messages, the delivery of the first it took
// hanging until proceed is closed.
type steppedClock struct {
	e             *env
	rn            *running
	rec           *recorder
	storeClk      *clock.Fake
	first, second *outbox.Message
	proceed       chan struct{}
}

func startSteppedClock(t *testing.T) steppedClock {
	t.Helper()
	sc := steppedClock{storeClk: clock.NewFake(epoch)}
	sc.e = newEnv(t, withOrdering(outbox.OrderingNone), func(c *store.Config) { c.Clock = sc.storeClk })
	sc.first, sc.second = msg("orders", "a", 1), msg("orders", "b", 2)
	sc.e.enqueue(sc.first, sc.second)
	var started chan struct{}
	sc.rec, started, sc.proceed = firstHangs()
	cfg := sc.e.config(map[string]Destination{"orders": {Transport: sc.rec.transport(), Timeout: time.Hour}})
	cfg.Workers = 1
	sc.rn = sc.e.start(cfg)
	<-started
	// The first claim asks for Workers messages (the size of a message is
	// not known yet); both must be held before the store's clock steps.
	sc.rn.waitFor("both messages claimed", func() bool { return sc.rn.r.Stats().InFlight == 2 })
	return sc
}

// TestReclaimedStreamKeepsItsOrder: the leases of a strict stream's
// claimed run lapse on the store's clock while the relay delivers its
// first message, and a message is written behind them. The next claim
// takes all three: the two in flight here (claimed again) and the new
// one. The new one must not become a task of its own, which a free
// worker would deliver before the run in flight finishes: it is given
// back, and delivered after the run.
func TestReclaimedStreamKeepsItsOrder(t *testing.T) {
	t.Parallel()
	storeClk := clock.NewFake(epoch)
	e := newEnv(t, func(c *store.Config) { c.Clock = storeClk })
	first, second, third := msg("orders", "a", 1), msg("orders", "a", 2), msg("orders", "a", 3)
	e.enqueue(first, second)
	rec, started, proceed := firstHangs()
	cfg := e.config(map[string]Destination{"orders": {Transport: rec.transport(), Timeout: time.Hour, Concurrency: 2}})
	cfg.Workers = 2
	rn := e.start(cfg)
	<-started
	rn.waitFor("both messages claimed", func() bool { return rn.r.Stats().InFlight == 2 })

	e.enqueue(third)
	storeClk.Advance(45 * time.Second) // past the 30 s lease on the store's clock only
	rn.waitFor("the run claimed again with the new message", func() bool { return rn.r.Stats().Reclaimed == 2 })
	// The new message, made a task of its own, goes to the free worker
	// and is delivered while the run's first delivery hangs; given back,
	// it is recorded released.
	rn.waitFor("the new message delivered or given back", func() bool {
		s := rn.r.Stats()
		return s.Delivered+s.Released > 0
	})
	close(proceed)
	rn.waitFor("all three delivered", func() bool { return rn.r.Stats().Delivered == 3 })
	rn.settle()

	want := []string{string(first.Payload), string(second.Payload), string(third.Payload)}
	if got := rec.got(); !slices.Equal(got, want) {
		t.Fatalf("deliveries = %q, want %q", got, want)
	}
}
