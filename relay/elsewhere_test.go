package relay

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop/circuitbreaker"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/retry"
	"github.com/backstophq/backstop/transport"
)

// TestMessageLeftElsewhereIsGivenBackUncharged: a transport that leaves
// messages to another process (transport.Elsewhere, an inbox of an older
// version without the handler of their type) has them given back,
// uncharged, due again after the delay it asked for, and tells the
// breaker nothing: ten such messages do not open a breaker that opens
// after three failures, nor take in-process retries, and the destination
// goes on delivering the others.
func TestMessageLeftElsewhereIsGivenBackUncharged(t *testing.T) {
	e := newEnv(t)
	var calls atomic.Int32
	tr := transport.Func(func(_ context.Context, m *outbox.Message) error {
		calls.Add(1)
		if m.Type == "new.type" {
			return transport.Elsewhere(errors.New("no handler here for new.type"), time.Minute)
		}
		return nil
	})
	var left []*outbox.Message
	for i := range 10 {
		m := msg("d", "", i)
		m.Type = "new.type"
		left = append(left, m)
	}
	e.enqueue(left...)
	known := msg("d", "", 99)
	e.enqueue(known)
	cfg := e.config(map[string]Destination{"d": {Transport: tr, InProcess: retry.NewConfig(3, nil),
		Breaker: &circuitbreaker.Config{MaxFailures: 3}}})
	rn := e.start(cfg)
	rn.waitFor("every message tried", func() bool { return calls.Load() >= 11 })
	rn.settle()
	if n := calls.Load(); n != 11 {
		t.Errorf("%d transport calls, want 11 (no in-process retry of a message left elsewhere)", n)
	}
	if st := rn.r.Breaker("d").State(); st != circuitbreaker.StateClosed {
		t.Errorf("breaker %v, want closed", st)
	}
	s := rn.r.Stats()
	if s.Delivered != 1 || s.Failed != 0 || s.DeadLettered != 0 || s.Released != 10 {
		t.Errorf("stats delivered %d, failed %d, dead-lettered %d, released %d; want 1, 0, 0, 10",
			s.Delivered, s.Failed, s.DeadLettered, s.Released)
	}
	for _, m := range left {
		got := e.get(m.ID)
		if got == nil || got.Attempts != 0 || !got.ScheduledFor.Equal(e.clk.Now().Add(time.Minute)) {
			t.Fatalf("message left elsewhere: %+v; want kept, 0 attempts, due in a minute", got)
		}
	}
}
