package relay

import (
	"context"
	"testing"
	"time"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
)

// cycleErr unwraps to itself.
type cycleErr struct{}

func (*cycleErr) Error() string   { return "cycle" }
func (e *cycleErr) Unwrap() error { return e }

// A handler's error whose Unwrap returns itself must not hold the worker
// in a busy loop (errors.As in CompletedSteps, errors.Is, the classifier)
// with the message leased for good: it is the handler's bug, dead-lettered
// as HandlerException like a panic.
// rounds makes the relay run n rounds.
func (rn *running) rounds(n int) {
	rn.e.t.Helper()
	for range n {
		before := rn.r.rounds.Load()
		rn.r.wake()
		if err := rn.r.turned.wait(rn.e.ctx, before); err != nil {
			rn.e.t.Fatal(err)
		}
	}
}

// stopAdvancing ends Run, moving the fake clock on meanwhile so that a
// delivery that never returns is abandoned after ShutdownTimeout and the
// cancel grace.
func (rn *running) stopAdvancing() {
	rn.e.t.Helper()
	rn.cancel()
	for {
		select {
		case err := <-rn.done:
			rn.done <- err
			return
		case <-rn.e.waitDone():
			rn.e.t.Fatal("Run did not return")
		case <-time.After(10 * time.Millisecond):
			rn.e.clk.Advance(time.Second)
		}
	}
}

func TestHandlerCyclicError(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	bad, good := msg("api", "a", 1), msg("api", "b", 2)
	e.enqueue(bad, good)
	rec := &recorder{fn: func(_ context.Context, m *outbox.Message, _ int) error {
		if m.ID == bad.ID {
			return &cycleErr{}
		}
		return nil
	}}
	rn := e.start(e.config(map[string]Destination{"api": {Transport: rec.transport()}}))
	rn.rounds(10)
	inFlight := rn.r.Stats().InFlight
	rn.stopAdvancing()
	if got := e.get(bad.ID); got == nil || got.DeadLetteredAt.IsZero() || got.FailureReason != errorhandling.ReasonHandlerException {
		t.Fatalf("after an error whose Unwrap returns itself (in flight %d): %+v (want dead-lettered, HandlerException)", inFlight, got)
	}
	if e.get(good.ID) != nil {
		t.Fatal("the other message was not delivered")
	}
}
