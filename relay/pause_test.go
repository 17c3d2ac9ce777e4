package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/retry"
)

// TestRetryAfterHoldsMessagesAlreadyClaimed: ten messages are claimed
// together; the first delivery gets 429 Retry-After 1 min. The pause holds
// every delivery to the destination, the nine already claimed too: none is
// sent during the minute (before, four went out, failed with 429 and
// tripped the breaker), and all are delivered after it, with no attempt
// charged.
func TestRetryAfterHoldsMessagesAlreadyClaimed(t *testing.T) {
	e := newEnv(t, withOrdering(outbox.OrderingNone))
	var msgs []*outbox.Message
	for i := range 10 {
		msgs = append(msgs, msg("api", fmt.Sprintf("s%d", i), i))
	}
	e.enqueue(msgs...)
	pausedUntil := time.Time{}
	var during []string
	rec := &recorder{}
	rec.fn = func(_ context.Context, m *outbox.Message, call int) error {
		now := e.clk.Now()
		if call == 1 {
			pausedUntil = now.Add(time.Minute)
			return errorhandling.RetryAfter(errorhandling.WithHTTPStatus(errors.New("429 too many requests"), 429), time.Minute)
		}
		if now.Before(pausedUntil) {
			during = append(during, string(m.Payload))
			// a rate limiter answers 429 while its window lasts
			return errorhandling.RetryAfter(errorhandling.WithHTTPStatus(errors.New("429 too many requests"), 429), pausedUntil.Sub(now))
		}
		return nil
	}
	cfg := e.config(map[string]Destination{"api": {Transport: rec.transport()}})
	cfg.Workers = 1
	rn := e.start(cfg)
	rn.settle()
	rn.advance(30 * time.Second)
	if st := rn.r.Stats().Destinations["api"]; len(during) > 0 || st.BreakerTrips != 0 {
		t.Errorf("%d deliveries sent during the Retry-After pause (%v), breaker trips %d", len(during), during, st.BreakerTrips)
	}
	rn.advance(31 * time.Second)
	rn.advance(5 * time.Minute)
	for _, m := range msgs {
		if e.get(m.ID) != nil {
			t.Errorf("%s not delivered after the pause", m.Payload)
		}
	}
	if st := rn.r.Stats().Destinations["api"]; st.Failed != 0 || st.DeadLettered != 0 {
		t.Errorf("attempts charged for a pause: %+v", st)
	}
}

// TestRetryAfterWithinTheAttemptPausesAtOnce: a 429 whose Retry-After (10
// s) the attempt can wait out in-process (its timeout is 30 s) pauses the
// destination as soon as it is answered, not once the attempt ends.
// Before, the pause was set only when the attempt ended: every other
// worker sent the destination a message meanwhile, got the same 429 and
// waited it out in-process too, holding a worker each, and the fleet was
// never told.
func TestRetryAfterWithinTheAttemptPausesAtOnce(t *testing.T) {
	e := newEnv(t, withOrdering(outbox.OrderingNone))
	first := msg("api", "", 0)
	e.enqueue(first)
	var (
		mu          sync.Mutex
		pausedUntil time.Time
		during      []string
	)
	rec := &recorder{}
	rec.fn = func(_ context.Context, m *outbox.Message, call int) error {
		now := e.clk.Now()
		mu.Lock()
		defer mu.Unlock()
		if call == 1 {
			pausedUntil = now.Add(10 * time.Second)
			return errorhandling.RetryAfter(errorhandling.WithHTTPStatus(errors.New("429 too many requests"), 429), 10*time.Second)
		}
		if now.Before(pausedUntil) {
			during = append(during, string(m.Payload))
			return errorhandling.RetryAfter(errorhandling.WithHTTPStatus(errors.New("429 too many requests"), 429), pausedUntil.Sub(now))
		}
		return nil
	}
	// The default in-process retry (the tests' is one try): three tries.
	cfg := e.config(map[string]Destination{"api": {Transport: rec.transport(),
		InProcess: retry.NewConfig(3, retry.InProcessBackoff())}})
	cfg.Workers = 4
	rn := e.start(cfg)
	rn.waitFor("the destination paused while the first attempt waits out its Retry-After", func() bool {
		return !rn.r.Stats().Destinations["api"].PausedUntil.IsZero()
	})
	var more []*outbox.Message
	for i := range 5 {
		more = append(more, msg("api", "", 1+i))
	}
	e.enqueue(more...)
	before := rn.r.rounds.Load()
	rn.waitFor("three rounds after the others were written", func() bool { return rn.r.rounds.Load() >= before+3 })
	mu.Lock()
	sent := len(during)
	mu.Unlock()
	if sent > 0 {
		t.Fatalf("%d deliveries sent during the Retry-After pause: %v", sent, during)
	}
	rn.advance(11 * time.Second)
	rn.advance(time.Minute)
	for _, m := range append(more, first) {
		if e.get(m.ID) != nil {
			t.Errorf("%s not delivered after the pause", m.Payload)
		}
	}
	if st := rn.r.Stats().Destinations["api"]; st.Failed != 0 || st.DeadLettered != 0 || st.BreakerTrips != 0 {
		t.Errorf("attempts charged or the breaker tripped for a pause: %+v", st)
	}
}
