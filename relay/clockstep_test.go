package relay

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/circuitbreaker"
	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// backClock is a fake clock whose Now can be stepped back, as an NTP
// correction steps a host's clock; Fake.Set only goes forward.
type backClock struct {
	*clock.Fake
	back atomic.Int64 // how far Now is behind the fake clock
}

func (c *backClock) Now() time.Time { return c.Fake.Now().Add(-time.Duration(c.back.Load())) }

// TestPauseDoesNotOutlastAClockSteppedBack: the fleet pauses "hooks" for
// 30 s, the relay holds the destination, then the clock is stepped back
// an hour. The store then holds nothing (a pause further ahead than
// store.MaxPause was set before the step), and the relay must not either:
// its gate's pause, set on the clock before the step, held the message for
// an hour more.
func TestPauseDoesNotOutlastAClockSteppedBack(t *testing.T) {
	clk := &backClock{}
	e := newEnv(t, func(c *store.Config) {
		clk.Fake = c.Clock.(*clock.Fake)
		c.Clock = clk
	})
	m := msg("hooks", "s", 1)
	e.enqueue(m)
	if err := e.s.PauseDestination(e.ctx, "hooks", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	cfg := e.config(map[string]Destination{"hooks": {Transport: rec.transport()}})
	cfg.Clock = clk
	rn := e.start(cfg)
	rn.settle()
	if n := len(rec.got()); n != 0 {
		t.Fatalf("%d deliveries while the fleet paused the destination", n)
	}
	clk.back.Store(int64(time.Hour))
	rn.advance(2 * time.Second)
	if e.get(m.ID) != nil {
		t.Fatalf("not delivered after the clock was stepped back an hour: the relay holds the pause until %v (now %v)",
			rn.r.Stats().Destinations["hooks"].PausedUntil, clk.Now())
	}
}

// TestRetryAfterDoesNotOutlastAClockSteppedBack: a 429 with Retry-After
// 30 s pauses "hooks"; the clock is then stepped back two hours. The
// relay never pauses a destination longer than maxRetryAfter, so a pause
// ending further ahead was set before the step: a message enqueued after
// it is delivered, where the pause held it for the two hours.
func TestRetryAfterDoesNotOutlastAClockSteppedBack(t *testing.T) {
	clk := &backClock{}
	e := newEnv(t, func(c *store.Config) {
		clk.Fake = c.Clock.(*clock.Fake)
		c.Clock = clk
	})
	e.enqueue(msg("hooks", "s", 1))
	rec := &recorder{}
	rec.fn = func(_ context.Context, _ *outbox.Message, call int) error {
		if call == 1 {
			return errorhandling.RetryAfter(errorhandling.WithHTTPStatus(errors.New("429 too many requests"), 429), 30*time.Second)
		}
		return nil
	}
	cfg := e.config(map[string]Destination{"hooks": {Transport: rec.transport()}})
	cfg.Clock = clk
	rn := e.start(cfg)
	rn.settle()
	if rn.r.Stats().Destinations["hooks"].PausedUntil.IsZero() {
		t.Fatal("the 429 with Retry-After paused nothing")
	}
	clk.back.Store(int64(2 * time.Hour))
	m := msg("hooks", "t", 2)
	e.enqueue(m)
	rn.advance(2 * time.Second)
	if e.get(m.ID) != nil {
		t.Fatalf("not delivered after the clock was stepped back two hours: the relay holds the pause until %v (now %v)",
			rn.r.Stats().Destinations["hooks"].PausedUntil, clk.Now())
	}
}

// TestProbeDoesNotOutlastAClockSteppedBack: three 503s open "down"'s
// circuit, its first probe is due in a second, and the clock is then
// stepped back an hour. The relay never puts a probe further off than its
// longest probe interval, so a probe time further ahead was set before the
// step: a message enqueued after it probes the destination, up again,
// within seconds and closes the circuit, where the probe waited out the
// hour. With a fleet the shared circuit's reading says the probe is due
// (the store sees the step); alone (NoFleet), the relay's gate must. With
// a fleet the three messages released when the circuit opened are then
// delivered too: the leader's beat has the store move their waits, set
// before the step, to their length from now (store.ScheduleRebaser);
// they waited out the hour. A relay alone has its store move them every
// monitorEvery.
func TestProbeDoesNotOutlastAClockSteppedBack(t *testing.T) {
	for _, alone := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoFleet=%v", alone), func(t *testing.T) { probeAfterAStepBack(t, alone) })
	}
}

func probeAfterAStepBack(t *testing.T, alone bool) {
	clk := &backClock{}
	e := newEnv(t, func(c *store.Config) {
		clk.Fake = c.Clock.(*clock.Fake)
		c.Clock = clk
	})
	var released []uuid.UUID
	for i := range 3 {
		m := msg("down", fmt.Sprintf("s%d", i), i)
		e.enqueue(m)
		released = append(released, m.ID)
	}
	var down atomic.Bool
	down.Store(true)
	rec := &recorder{fn: func(context.Context, *outbox.Message, int) error {
		if down.Load() {
			return errorhandling.WithHTTPStatus(errors.New("503 service unavailable"), 503)
		}
		return nil
	}}
	cfg := e.config(map[string]Destination{"down": {Transport: rec.transport(),
		Breaker: &circuitbreaker.Config{MaxFailures: 3}}})
	cfg.Clock = clk
	cfg.Workers, cfg.BatchSize, cfg.NoFleet = 1, 10, alone
	rn := e.start(cfg)
	rn.settle()
	if st := rn.r.Breaker("down").State(); st != circuitbreaker.StateOpen {
		t.Fatalf("breaker %v after three 503s, want open", st)
	}
	down.Store(false)
	clk.back.Store(int64(time.Hour))
	m := msg("down", "t", 3)
	e.enqueue(m)
	rn.advance(2 * DefaultMaxProbeInterval)
	if st := rn.r.Breaker("down").State(); st != circuitbreaker.StateClosed || e.get(m.ID) != nil {
		t.Fatalf("breaker %v, message enqueued after the step delivered: %v, %v after the clock was stepped back an hour; want closed by a probe",
			st, e.get(m.ID) == nil, 2*DefaultMaxProbeInterval)
	}
	pending := func() bool {
		for _, id := range released {
			if e.get(id) != nil {
				return true
			}
		}
		return false
	}
	beat := rn.r.cfg.HeartbeatInterval
	if alone {
		beat = monitorEvery // maintainAlone's turn
	}
	for i := 0; i < 3 && pending(); i++ {
		before := signalRound(&rn.r.maint.parked)
		rn.advance(beat)
		if err := rn.r.maint.parked.wait(e.ctx, before); err != nil { // the leader's beat (or the turn alone) is over
			t.Fatal(err)
		}
		rn.advance(2 * time.Second) // the moved waits (a second) pass
	}
	if pending() {
		t.Fatalf("the messages released when the circuit opened are not delivered three beats (%v) after the clock was stepped back an hour", 3*beat)
	}
}
