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
