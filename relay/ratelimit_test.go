package relay

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstophq/backstop/circuitbreaker"
	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// paced advances the fake clock by total in steps of 5 s, a relay round
// after each, so that the relay renews the leases it holds (every 10 s
// with the store's 30 s lease) as it would on a real clock.
func (rn *running) paced(total time.Duration) {
	rn.e.t.Helper()
	for total > 0 {
		step := min(total, 5*time.Second)
		rn.e.clk.Advance(step)
		total -= step
		rn.rounds(1)
	}
}

// delivered is how many messages the relay has delivered to dest.
func (rn *running) delivered(dest string) int64 {
	return rn.r.Stats().Destinations[dest].Delivered
}

// TestRateLimitSlowerThanTimeoutTripsNothing: one delivery every 100 s
// (per_second 0.01) with the default 30 s timeout delivers one message
// per 100 s of the clock; the messages waiting for their token are not
// charged, not counted by the breaker and not dead-lettered, and the
// relay leases no more of them than the limit starts within a lease.
// Before, a delivery waited for its token inside its timeout: every one
// but the first timed out waiting ("rate limit: context deadline
// exceeded"), the timeouts counted as the destination's failures, and the
// breaker of a destination that had failed nothing opened.
func TestRateLimitSlowerThanTimeoutTripsNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withOrdering(outbox.OrderingNone))
	var msgs []*outbox.Message
	for i := range 6 {
		msgs = append(msgs, msg("slow", fmt.Sprintf("s%d", i), i))
	}
	e.enqueue(msgs...)
	rec := &recorder{}
	rn := e.start(e.config(map[string]Destination{"slow": {
		Transport: rec.transport(),
		RateLimit: &RateLimit{PerSecond: 0.01},
	}}))
	rn.waitFor("the first delivery", func() bool { return rn.delivered("slow") == 1 })
	for k := int64(1); k < 4; k++ {
		rn.paced(95 * time.Second)
		if n := rn.delivered("slow"); n != k {
			t.Fatalf("%d delivered %v after delivery %d, want %d at one a 100 s", n, 95*time.Second, k, k)
		}
		if n := rn.r.fl.len(); n > 2 {
			t.Fatalf("the relay holds %d messages of a destination that starts one a 100 s with a 30 s lease, want at most 2", n)
		}
		rn.paced(5 * time.Second)
		rn.waitFor(fmt.Sprintf("delivery %d", k+1), func() bool { return rn.delivered("slow") == k+1 })
	}
	s := rn.r.Stats()
	if st := s.Destinations["slow"].Breaker; st != circuitbreaker.StateClosed || s.Destinations["slow"].BreakerTrips != 0 {
		t.Fatalf("breaker %v, %d trips, of a destination that failed nothing", st, s.Destinations["slow"].BreakerTrips)
	}
	if s.Failed != 0 || s.Released != 0 || s.Rejected != 0 || s.DeadLettered != 0 || s.LeasesLost != 0 {
		t.Fatalf("waiting for a token cost something: %+v", s)
	}
	if dl := e.deadLetters(); len(dl) != 0 {
		t.Fatalf("%d dead letters", len(dl))
	}
	if calls := len(rec.got()); calls != 4 {
		t.Fatalf("%d transport calls for 4 deliveries", calls)
	}
	for _, m := range msgs {
		if got := e.get(m.ID); got != nil && got.Attempts != 0 {
			t.Fatalf("a message waiting for its token was charged %d attempts", got.Attempts)
		}
	}
}

// TestRateLimitBurst: at one a second with a burst of three, three
// deliveries start at once, then one a second; an idle spell refills the
// bucket to three and no more.
func TestRateLimitBurst(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withOrdering(outbox.OrderingNone))
	enqueue := func(from, n int) {
		for i := from; i < from+n; i++ {
			e.enqueue(msg("api", fmt.Sprintf("s%d", i), i))
		}
	}
	enqueue(0, 6)
	rec := &recorder{}
	rn := e.start(e.config(map[string]Destination{"api": {
		Transport: rec.transport(),
		RateLimit: &RateLimit{PerSecond: 1, Burst: 3},
	}}))
	burst := func(want int64) {
		t.Helper()
		rn.waitFor("the burst", func() bool { return rn.delivered("api") >= want })
		rn.rounds(3)
		if n := rn.delivered("api"); n != want {
			t.Fatalf("%d delivered at once, want %d (a burst of 3)", n, want)
		}
	}
	burst(3)
	for want := int64(4); want <= 6; want++ {
		e.clk.Advance(time.Second)
		rn.waitFor(fmt.Sprintf("delivery %d", want), func() bool { return rn.delivered("api") >= want })
		rn.rounds(2)
		if n := rn.delivered("api"); n != want {
			t.Fatalf("%d delivered, want %d at one a second after the burst", n, want)
		}
	}
	// Idle for a minute: the bucket holds three again, not sixty.
	rn.paced(time.Minute)
	enqueue(6, 6)
	burst(9)
}

// TestRateLimitAfterTheClockSteppedBack: the clock stepped back an hour
// between two deliveries at one a 100 s must not hold the second for the
// hour.
func TestRateLimitAfterTheClockSteppedBack(t *testing.T) {
	t.Parallel()
	clk := &backClock{}
	e := newEnv(t, withOrdering(outbox.OrderingNone), func(c *store.Config) {
		clk.Fake = c.Clock.(*clock.Fake)
		c.Clock = clk
	})
	e.enqueue(msg("slow", "a", 1), msg("slow", "b", 2))
	cfg := e.config(map[string]Destination{"slow": {
		Transport: (&recorder{}).transport(),
		RateLimit: &RateLimit{PerSecond: 0.01},
	}})
	cfg.Clock = clk
	rn := e.start(cfg)
	rn.waitFor("the first delivery", func() bool { return rn.delivered("slow") == 1 })
	clk.back.Store(int64(time.Hour))
	rn.paced(100 * time.Second)
	rn.waitFor("the second delivery", func() bool { return rn.delivered("slow") == 2 })
}

// TestRateLimitedBesideUnlimited: a destination waiting for its tokens
// holds no worker, so one beside it without a limit runs as many
// deliveries at once as the pool gives it (Workers less the reserve).
// Had the waiting deliveries held workers, the other would have had two.
func TestRateLimitedBesideUnlimited(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withOrdering(outbox.OrderingNone))
	for i := range 10 {
		e.enqueue(msg("slow", fmt.Sprintf("s%d", i), i))
	}
	for i := range 20 {
		e.enqueue(msg("fast", fmt.Sprintf("f%d", i), i))
	}
	var running, most atomic.Int64
	release := make(chan struct{})
	fast := &recorder{fn: func(ctx context.Context, _ *outbox.Message, _ int) error {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}}
	cfg := e.config(map[string]Destination{
		"slow": {Transport: (&recorder{}).transport(), RateLimit: &RateLimit{PerSecond: 0.01}},
		"fast": {Transport: fast.transport()},
	})
	cfg.Workers = 4
	rn := e.start(cfg)
	rn.waitFor("three fast deliveries at once", func() bool { return most.Load() >= 3 })
	close(release)
	rn.waitFor("every fast message", func() bool { return rn.delivered("fast") == 20 })
	if n := rn.delivered("slow"); n != 1 {
		t.Fatalf("%d slow deliveries without the clock moving, want 1", n)
	}
}

// TestRateLimitValidated: New refuses a RateLimit that is no limit, naming
// the destination and the field.
func TestRateLimitValidated(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, tc := range []struct {
		rl   RateLimit
		want string
	}{
		{RateLimit{PerSecond: 0}, `Destinations["d"].RateLimit.PerSecond`},
		{RateLimit{PerSecond: -1}, `Destinations["d"].RateLimit.PerSecond`},
		{RateLimit{PerSecond: 1e-10}, `Destinations["d"].RateLimit.PerSecond`},
		{RateLimit{PerSecond: inf()}, `Destinations["d"].RateLimit.PerSecond`},
		{RateLimit{PerSecond: nan()}, `Destinations["d"].RateLimit.PerSecond`},
		{RateLimit{PerSecond: 1, Burst: -1}, `Destinations["d"].RateLimit.Burst`},
	} {
		rl := tc.rl
		_, err := New(e.s, e.config(map[string]Destination{"d": {Transport: (&recorder{}).transport(), RateLimit: &rl}}))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one naming %s", tc.rl, err, tc.want)
		}
	}
	rl := RateLimit{PerSecond: 2}
	r, err := New(e.s, e.config(map[string]Destination{"d": {Transport: (&recorder{}).transport(), RateLimit: &rl}}))
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Config().Destinations["d"].RateLimit; got.Burst != 1 || rl.Burst != 0 {
		t.Fatalf("burst %d (caller's %d), want the default 1 on a copy", got.Burst, rl.Burst)
	}
}

func inf() float64 { var z float64; return 1 / z }
func nan() float64 { var z float64; return z / z }

var limitEpoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// TestLimiterAcrossClockSteps: a wall clock stepped back an hour must not
// hold deliveries for the hour, nor give a token the limit did not allow;
// stepped forward a day, it frees burst tokens and no more.
func TestLimiterAcrossClockSteps(t *testing.T) {
	t.Parallel()
	t.Run("back an hour", func(t *testing.T) {
		l := newLimiter(&RateLimit{PerSecond: 1, Burst: 1})
		now := limitEpoch
		if d := l.take(now); d != 0 {
			t.Fatalf("the first token waits %v", d)
		}
		now = now.Add(-time.Hour)
		if d := l.take(now); d <= 0 || d > time.Second {
			t.Fatalf("just after a token, stepped back an hour: the next waits %v, want within (0, 1s]", d)
		}
		if d := l.take(now.Add(time.Second)); d != 0 {
			t.Fatalf("a second after the step the token waits %v", d)
		}
	})
	t.Run("forward a day", func(t *testing.T) {
		l := newLimiter(&RateLimit{PerSecond: 2, Burst: 3})
		now := limitEpoch
		for range 3 {
			if d := l.take(now); d != 0 {
				t.Fatalf("a token of the first burst waits %v", d)
			}
		}
		now = now.Add(24 * time.Hour)
		n := 0
		for l.take(now) == 0 && n <= 100 {
			n++
		}
		if n != 3 {
			t.Fatalf("a day on, %d tokens at once, want the burst (3)", n)
		}
	})
}

// TestLimiterOfHugeBurst: a burst so large that its intervals overflow a
// time.Duration is a bucket that never empties, not a negative one; and
// it leases no more than an int32 counts.
func TestLimiterOfHugeBurst(t *testing.T) {
	t.Parallel()
	l := newLimiter(&RateLimit{PerSecond: MinRatePerSecond, Burst: 1 << 40})
	for range 1000 {
		if d := l.take(limitEpoch); d != 0 {
			t.Fatalf("a bucket of 2^40 tokens ran dry: wait %v", d)
		}
	}
	if n := l.leased(time.Minute); n <= 0 {
		t.Fatalf("leased %d", n)
	}
}

// TestRateLimitDividedAmongTheFleet: with a second instance alive in the
// store, a relay keeps to half the limit (one a second with a burst of 2
// becomes one every 2 s with a burst of 1), so that the fleet as a whole
// keeps to it. Before, each relay of a fleet took the whole limit, and a
// partner's API limited to one a second got one a second from each
// replica.
func TestRateLimitDividedAmongTheFleet(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withOrdering(outbox.OrderingNone))
	if err := e.s.Heartbeat(e.ctx, store.Instance{ID: "another-relay"}); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		e.enqueue(msg("api", fmt.Sprintf("s%d", i), i))
	}
	rec := &recorder{}
	rn := e.start(e.config(map[string]Destination{"api": {
		Transport: rec.transport(),
		RateLimit: &RateLimit{PerSecond: 1, Burst: 2},
	}}))
	rn.waitFor("the first delivery", func() bool { return rn.delivered("api") >= 1 })
	rn.rounds(3)
	if n := rn.delivered("api"); n != 1 {
		t.Fatalf("%d delivered at once, want 1: half the burst of 2 with two instances alive", n)
	}
	e.clk.Advance(time.Second)
	rn.rounds(3)
	if n := rn.delivered("api"); n != 1 {
		t.Fatalf("%d delivered after a second, want 1: half of one a second with two instances alive", n)
	}
	e.clk.Advance(time.Second)
	rn.waitFor("the second delivery", func() bool { return rn.delivered("api") >= 2 })
}

// TestLimiterShare: a limit divided among n relays gives each PerSecond/n
// with a burst of Burst/n (at least 1), and whole again when alone.
func TestLimiterShare(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	l := newLimiter(&RateLimit{PerSecond: 4, Burst: 4})
	if !l.setShare(4) || l.setShare(4) {
		t.Fatal("setShare does not report the change once")
	}
	if l.take(t0) != 0 {
		t.Fatal("no first token")
	}
	if w := l.take(t0); w != time.Second {
		t.Fatalf("next token in %v, want 1s (4/s among 4)", w)
	}
	if n := l.leased(30 * time.Second); n != 31 {
		t.Fatalf("leased %d, want 1 + 30", n)
	}
	l.setShare(0)
	if w := l.wait(t0.Add(time.Second)); w != 0 {
		t.Fatalf("whole again, a token due in %v at the second", w)
	}
	if n := l.leased(30 * time.Second); n != 124 {
		t.Fatalf("leased %d alone, want 4 + 120", n)
	}
}

// TestRateLimitGauges: while a RateLimit holds back a message the relay
// holds for its destination, queued counts it and rate_limited is 1; a
// destination without a limit has no rate_limited series. Before, nothing
// told an operator that a destination's messages waited for tokens.
func TestRateLimitGauges(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withOrdering(outbox.OrderingNone))
	for i := range 3 {
		e.enqueue(msg("slow", fmt.Sprintf("s%d", i), i))
	}
	e.enqueue(msg("free", "f", 0))
	reg := prometheus.NewRegistry()
	cfg := e.config(map[string]Destination{
		"slow": {Transport: (&recorder{}).transport(), RateLimit: &RateLimit{PerSecond: 0.01}},
		"free": {Transport: (&recorder{}).transport()},
	})
	cfg.Metrics = reg
	rn := e.start(cfg)
	rn.waitFor("the first deliveries", func() bool { return rn.delivered("slow") == 1 && rn.delivered("free") == 1 })
	// One a 100 s with a 30 s lease: the relay holds two of slow's
	// messages (Burst + PerSecond × LeaseDuration), one of them delivered.
	rn.waitFor("the second held back", func() bool {
		got := gather(t, reg)
		return got[`backstop_queued{destination="slow"}`] == 1 && got[`backstop_rate_limited{destination="slow"}`] == 1
	})
	got := gather(t, reg)
	if _, ok := got[`backstop_rate_limited{destination="free"}`]; ok {
		t.Error("a destination without a RateLimit has a rate_limited series")
	}
	if v := got[`backstop_queued{destination="free"}`]; v != 0 {
		t.Errorf(`queued{destination="free"} = %v, want 0`, v)
	}
	rn.paced(100 * time.Second)
	rn.waitFor("the second delivery", func() bool { return rn.delivered("slow") == 2 })
	rn.paced(100 * time.Second)
	rn.waitFor("the third delivery", func() bool { return rn.delivered("slow") == 3 })
	got = gather(t, reg)
	if q, l := got[`backstop_queued{destination="slow"}`], got[`backstop_rate_limited{destination="slow"}`]; q != 0 || l != 0 {
		t.Errorf("all delivered: queued %v, rate_limited %v; want 0 and 0", q, l)
	}
}

// TestStoppedRelayLeavesTheFleet: a relay that stops leaves the fleet
// (store.FleetLeaver), so that the relays left count it out of their
// RateLimit shares at their next beat. It stayed counted alive for the
// InstanceTimeout, and every stop of a rolling deploy held the others to
// a share of the limit a relay no longer used.
func TestStoppedRelayLeavesTheFleet(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var fc store.FleetCounter = e.s
	alive := func() int {
		t.Helper()
		n, err := fc.LiveInstances(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if err := e.s.Heartbeat(e.ctx, store.Instance{ID: "another-relay"}); err != nil {
		t.Fatal(err)
	}
	rn := e.start(e.config(map[string]Destination{"api": {
		Transport: (&recorder{}).transport(), RateLimit: &RateLimit{PerSecond: 1, Burst: 2},
	}}))
	if err := rn.r.maint.parked.wait(e.ctx, 0); err != nil { // Run's beat is over
		t.Fatal(err)
	}
	if n := alive(); n != 2 {
		t.Fatalf("%d instances alive with the relay running, want 2", n)
	}
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}
	if n := alive(); n != 1 {
		t.Fatalf("%d instances alive once the relay stopped, with the clock where it was; want 1", n)
	}
}
