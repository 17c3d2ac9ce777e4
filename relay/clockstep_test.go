package relay

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

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
