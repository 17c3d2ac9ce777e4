package relay

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/backstophq/backstop/outbox"
)

// TestSlowDestinationDoesNotDelayAFastOne: a hundred messages for a
// destination whose deliveries hang wait ahead of ten for a fast one.
// The claim caps each destination's share, so the fast destination's
// messages are claimed and delivered while the slow one's still hang.
func TestSlowDestinationDoesNotDelayAFastOne(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withOrdering(outbox.OrderingNone))
	var slow []*outbox.Message
	for i := range 100 {
		slow = append(slow, msg("slow", fmt.Sprintf("s%d", i), i))
	}
	e.enqueue(slow...)
	var fast []*outbox.Message
	for i := range 10 {
		fast = append(fast, msg("fast", fmt.Sprintf("f%d", i), i))
	}
	e.enqueue(fast...)
	release := make(chan struct{})
	hang := &recorder{fn: func(ctx context.Context, _ *outbox.Message, _ int) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}}
	var quick atomic.Int64
	rec := &recorder{fn: func(context.Context, *outbox.Message, int) error { quick.Add(1); return nil }}
	cfg := e.config(map[string]Destination{
		"slow": {Transport: hang.transport(), Concurrency: 2},
		"fast": {Transport: rec.transport(), Concurrency: 2},
	})
	cfg.Workers = 4
	rn := e.start(cfg)
	rn.waitFor("the fast destination's messages", func() bool { return rn.r.Stats().Destinations["fast"].Delivered == 10 })
	if n := len(hang.got()); n > 2 {
		t.Fatalf("%d slow deliveries started, want at most its concurrency (2)", n)
	}
	close(release)
	rn.waitFor("every message", func() bool { return rn.r.Stats().Delivered == 110 })
	for _, m := range append(slow, fast...) {
		if e.get(m.ID) != nil {
			t.Fatalf("%s not delivered", m.Payload)
		}
	}
}
