package relay

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/outbox"
)

// A handler that forwards the message it was handed by enqueueing it for
// another destination (the store gives it a new ID, Seq and status in
// place) must not make the relay record the delivery against the new
// message: that deletes the forwarded message before anyone delivered it,
// and leaves the original leased for as long as the relay runs.
func TestHandlerForwardsTheMessageItWasHanded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	orig := msg("api", "s", 1)
	e.enqueue(orig)
	origID := orig.ID
	fwdID := make(chan uuid.UUID, 1)
	api := &recorder{fn: func(ctx context.Context, m *outbox.Message, _ int) error {
		m.ID = uuid.Nil
		m.Destination = "audit" // delivered by another relay
		if err := e.s.Enqueue(ctx, m); err != nil {
			return err
		}
		fwdID <- m.ID
		return nil
	}}
	rn := e.start(e.config(map[string]Destination{"api": {Transport: api.transport()}}))
	rn.waitFor("the handler", func() bool { return len(api.got()) > 0 })
	id := <-fwdID
	rn.rounds(5)
	if e.get(id) == nil {
		t.Error("the forwarded message was deleted without being delivered: the relay recorded the original's delivery under its ID")
	}
	if g := e.get(origID); g != nil {
		t.Errorf("the original message is still stored after its handler returned nil (in flight %d): %+v", rn.r.Stats().InFlight, g)
	}
}
