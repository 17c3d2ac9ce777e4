package natstransport_test

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop/transport"
	natstransport "github.com/backstophq/backstop/transport/nats"
)

// A delivery whose send guard fails (transport.WithSendGuard: the relay's
// lease lapsed) publishes nothing, and says so with the guard's error and
// transport.ErrNotSent; with the guard passing it publishes.
func TestSendGuardRefusesThePublish(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	s, prefix := newStream(t, js, jetstream.StreamConfig{})
	tr := newTransport(t, natstransport.Config{Subject: prefix + ".{type}"})
	errGone := errors.New("the lease lapsed (test)")
	refused := transport.WithSendGuard(ctxFor(t), func() error { return errGone })
	if err := tr.Deliver(refused, message(t)); !errors.Is(err, errGone) || !errors.Is(err, transport.ErrNotSent) {
		t.Fatalf("Deliver with the guard failing = %v, want the guard's error and ErrNotSent", err)
	}
	passed := transport.WithSendGuard(ctxFor(t), func() error { return nil })
	if err := tr.Deliver(passed, message(t)); err != nil {
		t.Fatalf("Deliver with the guard passing: %v", err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("stream holds %d messages, want 1 (the refused one was published)", info.State.Msgs)
	}
}
