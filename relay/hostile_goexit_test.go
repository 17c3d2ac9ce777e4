package relay

import (
	"context"
	"runtime"
	"testing"

	"github.com/backstophq/backstop/outbox"
)

// A handler that calls runtime.Goexit (t.FailNow or t.Fatal in a test's
// handler, a helper that ends its goroutine) ends the worker's goroutine:
// recover sees nil. The message must still get an outcome, and the pool
// must keep its workers.
func TestHandlerGoexit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	bad := msg("api", "a", 0)
	e.enqueue(bad)
	var good []*outbox.Message
	for i := 1; i <= 4; i++ {
		good = append(good, msg("api", "b", i))
	}
	rec := &recorder{fn: func(_ context.Context, m *outbox.Message, _ int) error {
		if m.ID == bad.ID {
			runtime.Goexit()
		}
		return nil
	}}
	cfg := e.config(map[string]Destination{"api": {Transport: rec.transport()}})
	cfg.Workers = 1
	rn := e.start(cfg)
	rn.rounds(5)
	e.enqueue(good...)
	rn.rounds(10)
	got := e.get(bad.ID)
	t.Logf("bad: %+v stats %+v", got, rn.r.Stats())
	if got == nil || got.DeadLetteredAt.IsZero() {
		t.Errorf("the message whose handler called Goexit: %+v (want dead-lettered)", got)
	}
	for _, m := range good {
		if e.get(m.ID) != nil {
			t.Fatalf("a later message was not delivered: the only worker is gone")
		}
	}
}

// A hook that calls runtime.Goexit ran on the recorder's goroutine and
// ended it: no outcome was recorded after it. Hooks now run on a
// goroutine of their own.
func TestHookGoexit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withOrdering(outbox.OrderingNone))
	first := msg("api", "a", 0)
	e.enqueue(first)
	rec := &recorder{fn: func(context.Context, *outbox.Message, int) error { return nil }}
	cfg := e.config(map[string]Destination{"api": {Transport: rec.transport()}})
	cfg.OnDelivered = func(m *outbox.Message) {
		if m.ID == first.ID {
			runtime.Goexit()
		}
	}
	rn := e.start(cfg)
	rn.settle()
	later := msg("api", "b", 1)
	e.enqueue(later)
	rn.settle()
	for _, m := range []*outbox.Message{first, later} {
		if e.get(m.ID) != nil {
			t.Fatalf("message %s was delivered but not recorded: the recorder is gone", m.ID)
		}
	}
	if !e.logs.contains("relay hook called runtime.Goexit") {
		t.Fatal("the hook's Goexit was not logged")
	}
}
