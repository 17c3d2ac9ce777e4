package relay

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
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
