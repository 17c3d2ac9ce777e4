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

// TestRecoveryWithinSecondsOfTheDestination: a destination goes down long
// enough to open its circuit, for 10 s or for 10 min. With the default
// probe settings, every message is delivered within 5 s of the
// destination coming back, and the outage charged no attempt.
func TestRecoveryWithinSecondsOfTheDestination(t *testing.T) {
	t.Parallel()
	for _, outage := range []time.Duration{10 * time.Second, 10 * time.Minute} {
		t.Run(outage.String(), func(t *testing.T) {
			t.Parallel()
			recovery(t, outage)
		})
	}
}

func recovery(t *testing.T, outage time.Duration) {
	e := newEnv(t)
	var msgs []*outbox.Message
	for i := range 20 {
		msgs = append(msgs, msg("hooks", fmt.Sprintf("s%d", i%5), i))
	}
	e.enqueue(msgs...)
	var down atomic.Bool
	down.Store(true)
	var failed atomic.Int64
	rec := &recorder{fn: func(context.Context, *outbox.Message, int) error {
		if down.Load() {
			failed.Add(1)
			return errorhandling.WithHTTPStatus(errors.New("503 service unavailable"), 503)
		}
		return nil
	}}
	rn := e.start(e.config(map[string]Destination{"hooks": {Transport: rec.transport()}}))
	rn.settle()
	if st := rn.r.Breaker("hooks").State(); st != circuitbreaker.StateOpen {
		t.Fatalf("breaker %v at the start of the outage", st)
	}
	// Through the outage in steps of a little under a minute (the relay
	// sees the clock jump and probes once a step), ending at an arbitrary
	// point of the probes' schedule.
	for elapsed := time.Duration(0); elapsed < outage; {
		step := min(55*time.Second+time.Second/3, outage-elapsed)
		rn.advance(step)
		elapsed += step
	}
	if e.gone(msgs...) {
		t.Fatal("delivered during the outage")
	}
	down.Store(false)
	for s := 1; !e.gone(msgs...); s++ {
		if s > 5 {
			t.Fatalf("%v outage: not every message delivered 5 s after the destination came back (stats %+v)", outage, rn.r.Stats())
		}
		rn.advance(time.Second)
	}
	for _, m := range msgs {
		if n := rec.count(string(m.Payload)); n < 1 {
			t.Fatalf("%s never reached the transport", m.Payload)
		}
	}
	if s := rn.r.Stats(); s.Failed != 0 || s.DeadLettered != 0 || s.Delivered != int64(len(msgs)) {
		t.Fatalf("stats = %+v", s)
	}
	// A handful of tries before the circuit opened, then one probe per
	// step at most.
	if max := int64(outage/(55*time.Second)) + 10; failed.Load() > max {
		t.Fatalf("%d failed tries in a %v outage, want at most %d", failed.Load(), outage, max)
	}
}

// gone reports whether every message of msgs is delivered.
func (e *env) gone(msgs ...*outbox.Message) bool {
	e.t.Helper()
	for _, m := range msgs {
		if e.get(m.ID) != nil {
			return false
		}
	}
	return true
}

// A probe of an open circuit is one try, with the default in-process
// retry: its verdict schedules the next probe. It used to wait out the
// in-process back-off before it stopped (a second after a 503), which put
// every probe a second later than its schedule, and delivery resumed up to
// 6 s after the destination came back. Here the fake clock moves only to
// the probe's time: a probe that waits for its back-off never ends.
func TestProbeIsOneTry(t *testing.T) {
	e := newEnv(t)
	var msgs []*outbox.Message
	for i := range 10 {
		msgs = append(msgs, msg("hooks", fmt.Sprintf("s%d", i), i))
	}
	e.enqueue(msgs...)
	rec := &recorder{fn: func(context.Context, *outbox.Message, int) error {
		return errorhandling.WithHTTPStatus(errors.New("503 service unavailable"), 503)
	}}
	rn := e.start(e.config(map[string]Destination{"hooks": {Transport: rec.transport(),
		InProcess: retry.NewConfig(3, retry.InProcessBackoff())}}))
	// Through the in-process tries (their back-off waits on the fake
	// clock) until the circuit opens and nothing is in flight.
	for i := 0; rn.r.Breaker("hooks").State() != circuitbreaker.StateOpen || rn.r.Stats().InFlight > 0; i++ {
		if i > 100 {
			t.Fatalf("the breaker did not open: %+v", rn.r.Stats())
		}
		e.clk.Advance(200 * time.Millisecond)
		before := rn.r.rounds.Load()
		rn.waitFor("a round", func() bool { return rn.r.rounds.Load() > before })
	}
	for probe := range 3 {
		tries, trips := len(rec.got()), rn.r.Stats().Destinations["hooks"].BreakerTrips
		e.clk.Advance(DefaultMaxProbeInterval)
		rn.waitStill(fmt.Sprintf("verdict of probe %d", probe), "it waits for the in-process back-off", func() bool {
			return rn.r.Stats().Destinations["hooks"].BreakerTrips > trips
		})
		if n := len(rec.got()) - tries; n != circuitbreaker.DefaultHalfOpenMaxRequests {
			t.Fatalf("probe %d: %d tries, want one", probe, n)
		}
	}
}

// TestDeliveryStopsAtOnceWhenTheCircuitOpensDuringItsTry: a delivery's
// first try fails while the destination's circuit opens (other
// deliveries' failures open it). The delivery stops then and is released
// uncharged; it used to wait out the in-process back-off first, holding
// its worker for a destination already found down.
func TestDeliveryStopsAtOnceWhenTheCircuitOpensDuringItsTry(t *testing.T) {
	e := newEnv(t)
	m := msg("hooks", "s", 1)
	e.enqueue(m)
	var r *Relay
	rec := &recorder{fn: func(context.Context, *outbox.Message, int) error {
		// as the end of another delivery that failed does
		d := r.dests["hooks"]
		permit, err := d.breaker.Allow()
		if err != nil {
			return err
		}
		fault := errorhandling.WithHTTPStatus(errors.New("503 service unavailable"), 503)
		permitDone(permit, fault)
		if !d.trip(e.clk.Now()) {
			t.Error("the circuit was open already")
		}
		return fault
	}}
	r = e.newRelay(e.config(map[string]Destination{"hooks": {Transport: rec.transport(),
		Breaker:   &circuitbreaker.Config{MaxFailures: 1},
		InProcess: retry.NewConfig(3, retry.NewFixedDelay(time.Hour, false))}}))
	rn := e.run(r)
	rn.waitStill("release of the delivery", "it waits for the in-process back-off", func() bool {
		return rn.r.Stats().Released == 1
	})
	if n := len(rec.got()); n != 1 {
		t.Fatalf("%d tries, want one", n)
	}
	if got := e.get(m.ID); got == nil || got.Attempts != 0 {
		t.Fatalf("message after the delivery: %+v; want it waiting, no attempt charged", got)
	}
}
