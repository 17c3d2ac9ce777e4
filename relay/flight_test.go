package relay

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/backstophq/backstop/circuitbreaker"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
)

// TestNoDoubleFlightUnderSteppedClock: while a delivery hangs, the clock
// jumps past the lease (a clock step on the host, or a stall). The claims
// that follow find the message claimable again, but the relay never
// delivers it a second time while the first delivery is in flight, and
// records it delivered once it returns.
func TestNoDoubleFlightUnderSteppedClock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := msg("orders", "s", 1)
	e.enqueue(m)
	rec, started, proceed := firstHangs()
	rn := e.start(e.config(map[string]Destination{"orders": {Transport: rec.transport(), Timeout: time.Hour}}))
	<-started
	for range 3 {
		e.clk.Advance(45 * time.Second) // each step past the 30 s lease
		rounds := rn.r.rounds.Load()
		rn.waitFor("two rounds after the step", func() bool { return rn.r.rounds.Load() >= rounds+2 })
	}
	if n := len(rec.got()); n != 1 {
		t.Fatalf("the transport was called %d times while the first delivery was in flight", n)
	}
	close(proceed)
	rn.settle()
	if e.get(m.ID) != nil {
		t.Fatal("the delivery was not recorded")
	}
	if n := rec.count(string(m.Payload)); n != 1 {
		t.Fatalf("delivered %d times", n)
	}
	if s := rn.r.Stats(); s.Delivered != 1 || s.InFlight != 0 {
		t.Fatalf("stats = %+v", s)
	}
}

// TestLapsedLeaseIsNotStarted: a message waits for the only worker while
// another instance takes it over (its lease was lost). When the worker is
// free the relay does not start it: the other instance has it.
func TestLapsedLeaseIsNotStarted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withOrdering(outbox.OrderingNone))
	first, second := msg("orders", "a", 1), msg("orders", "b", 2)
	e.enqueue(first, second)
	rec, started, proceed := firstHangs()
	cfg := e.config(map[string]Destination{"orders": {Transport: rec.transport(), Timeout: time.Hour}})
	cfg.Workers = 1
	rn := e.start(cfg)
	<-started
	waiting := second
	if rec.got()[0] == string(second.Payload) {
		waiting = first
	}
	if _, err := e.s.DB().ExecContext(e.ctx, `UPDATE backstop_outbox SET instance_id = 'thief' WHERE id = ?`, waiting.ID.String()); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(11 * time.Second) // past LeaseDuration/3: the renewal finds it gone
	rn.waitFor("the lost lease", func() bool { return rn.r.Stats().LeasesLost == 1 })
	close(proceed)
	rn.settle()
	if n := rec.count(string(waiting.Payload)); n != 0 {
		t.Fatalf("a message whose lease was lost was delivered %d times", n)
	}
	if got := e.get(waiting.ID); got == nil || got.InstanceID != "thief" {
		t.Fatalf("the other instance's message = %+v", got)
	}
	if logs := e.logs.find("lease lost; the message will not be started here"); len(logs) != 1 {
		t.Fatalf("operations log = %+v", logs)
	}
}

// TestStallIsNotBlamedOnTheDestination: a delivery times out while the
// relay itself was stalled. The timeout is not counted against the
// destination's breaker, and the message is given back uncharged.
func TestStallIsNotBlamedOnTheDestination(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := msg("orders", "s", 1)
	e.enqueue(m)
	started := make(chan struct{})
	rec := &recorder{fn: func(ctx context.Context, _ *outbox.Message, call int) error {
		if call == 1 {
			close(started)
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}}
	cfg := e.config(map[string]Destination{"orders": {
		Transport: rec.transport(), Timeout: 5 * time.Second,
		Breaker: &circuitbreaker.Config{MaxFailures: 1},
	}})
	rn := e.start(cfg)
	<-started
	now := e.clk.Now()
	rn.r.stalls.add(now, now.Add(20*time.Second)) // as the stall detector would
	e.clk.Advance(20 * time.Second)
	rn.waitFor("the outcome", func() bool { return rn.r.Stats().Released == 1 })
	if st := rn.r.Breaker("orders").GetStats(); st.State != circuitbreaker.StateClosed || st.TotalFailures != 0 {
		t.Fatalf("the stall counted against the destination: %+v", st)
	}
	// The message may already be delivered again (it was given back
	// uncharged, so it is claimable at once); either way no attempt was
	// charged for the stall.
	if s := rn.r.Stats(); s.Failed != 0 || s.DeadLettered != 0 {
		t.Fatalf("the stall charged the message: %+v", s)
	}
	if got := e.get(m.ID); got != nil && got.Attempts != 0 {
		t.Fatalf("the stall charged the message: %+v", got)
	}
	if logs := e.logs.find("the relay stalled during the delivery"); len(logs) != 1 {
		t.Fatalf("operations log = %+v", logs)
	}
	// Without a stall the same timeout counts (the breaker opens at once).
	rn.advance(time.Minute)
	if e.get(m.ID) != nil {
		t.Fatal("not delivered after the stall")
	}
}

// TestRetryAfterPausesTheDestination: a 429 with Retry-After on one
// message holds every message of the destination until then, and the
// pause shows in the destination's stats.
func TestRetryAfterPausesTheDestination(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withOrdering(outbox.OrderingNone))
	first := msg("api", "a", 1)
	e.enqueue(first)
	rec := &recorder{fn: func(_ context.Context, _ *outbox.Message, call int) error {
		if call == 1 {
			return errorhandling.RetryAfter(errorhandling.WithHTTPStatus(errors.New("429 too many requests"), 429), time.Minute)
		}
		return nil
	}}
	rn := e.start(e.config(map[string]Destination{"api": {Transport: rec.transport()}}))
	rn.settle()
	if until := rn.r.Stats().Destinations["api"].PausedUntil; !until.Equal(epoch.Add(time.Minute)) {
		t.Fatalf("PausedUntil = %v, want %v", until, epoch.Add(time.Minute))
	}
	later := []*outbox.Message{msg("api", "b", 2), msg("api", "c", 3)}
	e.enqueue(later...)
	rn.advance(30 * time.Second)
	if n := len(rec.got()); n != 1 {
		t.Fatalf("%d calls during the pause, want none after the 429", n-1)
	}
	rn.advance(30 * time.Second)
	if until := rn.r.Stats().Destinations["api"].PausedUntil; !until.IsZero() {
		t.Fatalf("PausedUntil = %v once the pause is over, want zero", until)
	}
	for _, m := range append(later, first) {
		if e.get(m.ID) != nil {
			t.Fatalf("%s not delivered after the pause", m.Payload)
		}
	}
}
