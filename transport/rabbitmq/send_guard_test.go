package rabbitmq_test

import (
	"errors"
	"testing"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/transport"
	"github.com/backstophq/backstop/transport/rabbitmq"
)

// A delivery whose send guard fails (transport.WithSendGuard: the relay's
// lease lapsed) publishes nothing, and says so with the guard's error and
// transport.ErrNotSent; the next, with the guard passing, is the first
// the queue gets.
func TestSendGuardRefusesThePublish(t *testing.T) {
	t.Parallel()
	a := connect(t)
	q := a.queue("", "", nil)
	_, raw := a.readBack(q)
	tr := newTransport(t, rabbitmq.Config{RoutingKeyFunc: func(*outbox.Message) string { return q }})
	ctx := ctxFor(t)
	errGone := errors.New("the lease lapsed (test)")
	refused := transport.WithSendGuard(ctx, func() error { return errGone })
	if err := tr.Deliver(refused, message(t)); !errors.Is(err, errGone) || !errors.Is(err, transport.ErrNotSent) {
		t.Fatalf("Deliver with the guard failing = %v, want the guard's error and ErrNotSent", err)
	}
	m := message(t)
	if err := tr.Deliver(transport.WithSendGuard(ctx, func() error { return nil }), m); err != nil {
		t.Fatalf("Deliver with the guard passing: %v", err)
	}
	if d := raw.next(t, ctx); d.MessageId != m.ID.String() {
		t.Fatalf("the queue's first message is %s, want %s (the refused one was published)", d.MessageId, m.ID)
	}
}
