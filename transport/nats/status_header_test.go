package natstransport_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop/errorhandling"
	natstransport "github.com/backstophq/backstop/transport/nats"
)

// TestWhatDeliverAcceptsAConsumerReceives: nats.go's JetStream consumers
// (jetstream's Messages, Consume and Fetch, natsinbox's among them) take a
// message with an empty payload and a "Status" header for a status
// message of the server and never hand it over: "Status: 400" stops the
// iterator, "Status: 100" is dropped as a heartbeat, any other value is
// dropped as an error. Deliver accepted such a message (an event with no
// body and a Status header of the application's), JetStream stored it,
// and the consumer never saw it: redelivered after each AckWait and
// swallowed again until MaxDeliver dropped it, holding every later
// message meanwhile with MaxAckPending 1 (as backstop serve's NATS
// sources create their consumers). What Deliver reports delivered, a
// consumer must receive; else Deliver refuses it as the message's fault.
func TestWhatDeliverAcceptsAConsumerReceives(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	for _, status := range []string{"shipped", "400", "100"} {
		t.Run(status, func(t *testing.T) {
			t.Parallel()
			s, prefix := newStream(t, js, jetstream.StreamConfig{})
			ctx := ctxFor(t)
			cons, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "probe",
				AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Second, MaxAckPending: 1})
			if err != nil {
				t.Fatal(err)
			}
			tr := newTransport(t, natstransport.Config{Subject: prefix + ".{type}"})
			odd := message(t)
			odd.Payload = nil
			odd.Headers = map[string]string{"Status": status}
			plain := message(t)
			oddErr := tr.Deliver(ctx, odd)
			if oddErr != nil {
				wantFault(t, oddErr, errorhandling.ClassPermanent, errorhandling.BlameMessage, "invalid_message")
			}
			if err := tr.Deliver(ctx, plain); err != nil {
				t.Fatal(err)
			}
			want := []string{plain.ID.String()}
			if oddErr == nil {
				want = []string{odd.ID.String(), plain.ID.String()}
			}
			it, err := cons.Messages()
			if err != nil {
				t.Fatal(err)
			}
			defer it.Stop()
			for _, id := range want {
				m, err := it.Next(jetstream.NextMaxWait(3 * time.Second))
				if err != nil {
					if errors.Is(err, jetstream.ErrMsgIteratorClosed) || errors.Is(err, jetstream.ErrBadRequest) {
						t.Fatalf("waiting for %s: the consumer's iterator ended: %v (Deliver returned nil for the Status: %s message)", id, err, status)
					}
					t.Fatalf("waiting for %s: %v (Deliver returned nil for the Status: %s message, which no consumer receives)", id, err, status)
				}
				if got := m.Headers().Get(jetstream.MsgIDHeader); got != id {
					t.Fatalf("received %s, want %s", got, id)
				}
				_ = m.Ack()
			}
		})
	}
}
