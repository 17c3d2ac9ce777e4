package relay

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop/circuitbreaker"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/retry"
)

func TestDestinationOutageOpensBreakerAndChargesNoAttempts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var msgs []*outbox.Message
	for i := range 10 {
		msgs = append(msgs, msg("down", fmt.Sprintf("s%d", i), i))
	}
	e.enqueue(msgs...)
	var down atomic.Bool
	down.Store(true)
	var failing atomic.Int64
	rec := &recorder{fn: func(context.Context, *outbox.Message, int) error {
		if down.Load() {
			failing.Add(1)
			return errorhandling.WithHTTPStatus(errors.New("503 service unavailable"), 503)
		}
		return nil
	}}
	cfg := e.config(map[string]Destination{"down": {
		Transport: rec.transport(),
		Breaker:   &circuitbreaker.Config{MaxFailures: 3},
		// Probes back off up to a minute, to see the doubling.
		MaxProbeInterval: time.Minute,
	}})
	cfg.Workers, cfg.BatchSize = 1, 10
	rn := e.start(cfg)
	rn.settle()

	// Three failures open the breaker; the other seven claimed with them
	// are given back unattempted, and no more are claimed.
	if n := failing.Load(); n != 3 {
		t.Fatalf("transport calls before the breaker opened = %d, want 3", n)
	}
	s := rn.r.Stats()
	if s.Destinations["down"].Breaker != circuitbreaker.StateOpen || s.Rejected != 7 || s.Released != 10 || s.Failed != 0 {
		t.Fatalf("stats = %+v", s)
	}
	// While it stays open, a single probe claim goes through after 1 s,
	// then after 2 s, 4 s, ... up to MaxProbeInterval (1 min); each
	// probe fails and re-opens the circuit, and nothing else is claimed.
	claimed := s.Claimed
	calls := int64(3)
	wait := time.Second
	for probe := 1; probe <= 8; probe++ {
		rn.advance(wait - time.Millisecond)
		if s := rn.r.Stats(); s.Claimed != claimed || failing.Load() != calls {
			t.Fatalf("probe %d: claimed before it was due: %d claims (was %d), %d calls (was %d)", probe, s.Claimed, claimed, failing.Load(), calls)
		}
		rn.advance(time.Millisecond)
		calls++
		if n := failing.Load(); n != calls {
			t.Fatalf("probe %d after %v: %d calls, want %d (one probe)", probe, wait, n, calls)
		}
		if st := rn.r.Breaker("down").State(); st != circuitbreaker.StateOpen {
			t.Fatalf("breaker %v after a failed probe", st)
		}
		claimed = rn.r.Stats().Claimed
		wait = min(2*wait, time.Minute)
	}
	for _, m := range msgs {
		got := e.get(m.ID)
		if got == nil || got.Attempts != 0 || got.DeadLetteredAt.After(time.Time{}) {
			t.Fatalf("an outage charged the message: %+v", got)
		}
	}
	if len(e.deadLetters()) != 0 {
		t.Fatal("an outage filled the DLQ")
	}

	// Recovery: the next probe succeeds, the breaker closes, everything
	// goes.
	down.Store(false)
	rn.advance(wait)
	if st := rn.r.Breaker("down").State(); st != circuitbreaker.StateClosed {
		t.Fatalf("breaker %v after a good probe", st)
	}
	rn.advance(10 * time.Minute) // past every destination back-off
	for _, m := range msgs {
		if e.get(m.ID) != nil {
			t.Fatalf("%s not delivered after recovery", m.Payload)
		}
		if n := rec.count(string(m.Payload)); n < 1 {
			t.Fatalf("%s never reached the transport", m.Payload)
		}
	}
	if got := int64(len(rec.got())); got != failing.Load()+int64(len(msgs)) {
		t.Fatalf("transport calls = %d, want %d failing + %d good", got, failing.Load(), len(msgs))
	}
	if s := rn.r.Stats(); s.Delivered != 10 || s.DeadLettered != 0 || s.Destinations["down"].BreakerTrips != 9 {
		t.Fatalf("stats = %+v", s)
	}
	if logs := e.logs.find("circuit breaker state changed"); len(logs) == 0 {
		t.Fatal("the breaker's transitions were not logged through the relay's logger")
	}
}

func TestRetryAfterHintIsRespected(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := msg("api", "s", 1)
	e.enqueue(m)
	rec := &recorder{fn: func(_ context.Context, _ *outbox.Message, call int) error {
		if call == 1 {
			return errorhandling.RetryAfter(errorhandling.WithHTTPStatus(errors.New("429 too many requests"), 429), 90*time.Second)
		}
		return nil
	}}
	rn := e.start(e.config(map[string]Destination{"api": {
		Transport: rec.transport(),
		InProcess: retry.NewConfig(3, retry.InProcessBackoff()), // a 90 s hint does not fit in one attempt
	}}))
	rn.settle()
	got := e.get(m.ID)
	if got == nil || got.Attempts != 0 || got.ScheduledFor.Before(epoch.Add(90*time.Second)) || got.Error == "" {
		t.Fatalf("after the 429: %+v", got)
	}
	rn.advance(89 * time.Second)
	if n := len(rec.got()); n != 1 {
		t.Fatalf("retried before Retry-After: %d calls", n)
	}
	rn.advance(time.Second)
	if e.get(m.ID) != nil {
		t.Fatal("not delivered after Retry-After")
	}
}

// A Retry-After short enough to fit in the attempt is not waited out by
// the worker: the destination is paused, the message released uncharged,
// and it is delivered once the pause ends. The worker used to sleep
// through the pause, held from the other destinations, and every delivery
// that did so tried again the moment it ended, in one burst.
func TestShortRetryAfterReleasesTheWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := msg("api", "s", 1)
	e.enqueue(m)
	rec := &recorder{fn: func(_ context.Context, _ *outbox.Message, call int) error {
		if call == 1 {
			return errorhandling.RetryAfter(errorhandling.WithHTTPStatus(errors.New("429"), 429), 5*time.Second)
		}
		return nil
	}}
	rn := e.start(e.config(map[string]Destination{"api": {
		Transport: rec.transport(),
		InProcess: retry.NewConfig(3, retry.NewFixedDelay(0, false)),
	}}))
	rn.settle()
	if got := e.get(m.ID); got == nil || got.Attempts != 0 || len(rec.got()) != 1 {
		t.Fatalf("after the 429: %+v, %d calls; want it waiting uncharged after one", got, len(rec.got()))
	}
	if s := rn.r.Stats(); s.Retries != 0 || s.Released != 1 || s.InFlight != 0 {
		t.Fatalf("stats = %+v; want the message released, no worker waiting", s)
	}
	rn.advance(4 * time.Second)
	if n := len(rec.got()); n != 1 {
		t.Fatalf("%d calls within the Retry-After", n)
	}
	rn.advance(time.Second)
	if e.get(m.ID) != nil {
		t.Fatal("not delivered once the pause ended")
	}
}

// An operator's Reset of a destination's breaker (Relay.Breaker, whose
// doc says operators may) resumes the deliveries at once. The breaker
// closed, but the relay's gate stayed open until its next probe: nothing
// was claimed for the destination meanwhile, up to MaxProbeInterval.
func TestBreakerResetResumesDeliveries(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first := msg("down", "s0", 0)
	e.enqueue(first)
	var down atomic.Bool
	down.Store(true)
	rec := &recorder{fn: func(context.Context, *outbox.Message, int) error {
		if down.Load() {
			return errorhandling.WithHTTPStatus(errors.New("503 service unavailable"), 503)
		}
		return nil
	}}
	cfg := e.config(map[string]Destination{"down": {
		Transport:        rec.transport(),
		Breaker:          &circuitbreaker.Config{MaxFailures: 1},
		FirstProbe:       time.Minute,
		MaxProbeInterval: time.Minute,
	}})
	rn := e.start(cfg)
	rn.settle()
	if st := rn.r.Stats().Destinations["down"].Breaker; st != circuitbreaker.StateOpen {
		t.Fatalf("breaker %v after the failure, want open", st)
	}
	down.Store(false)
	rn.r.Breaker("down").Reset()
	later := msg("down", "s1", 1)
	e.enqueue(later)
	rn.settle() // the clock does not move: the probe, a minute away, is not due
	if e.get(later.ID) != nil {
		t.Fatalf("a message written after the breaker was reset was not delivered: the relay still waits for its probe")
	}
	if !e.logs.contains("circuit reset; deliveries resume") {
		t.Fatal("the reset was not logged")
	}
}
