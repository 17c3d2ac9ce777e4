package natstransport_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop/errorhandling"
	natstransport "github.com/backstophq/backstop/transport/nats"
)

// TestStreamThatDoesNotAcknowledgeIsNotGivenACopyPerRetry: a stream
// configured with no_ack stores what is published to it and never sends a
// PubAck. Every Deliver timed out, and every retry stored another copy of
// the message once the duplicate window had passed, for as long as the
// stream stayed so: no delivery could ever succeed, and the copies had no
// bound. Once a PubAck has not come, the transport reads the stream; later
// Delivers to it fail at once without publishing (no_ack, the
// destination's fault), and deliveries resume once no_ack is turned off.
func TestStreamThatDoesNotAcknowledgeIsNotGivenACopyPerRetry(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	s, prefix := newStream(t, js, jetstream.StreamConfig{NoAck: true})
	const timeout = time.Second
	tr := newTransport(t, natstransport.Config{Subject: prefix + ".{type}", Timeout: timeout})
	ctx := ctxFor(t)

	wantFault(t, tr.Deliver(ctx, message(t)), errorhandling.ClassTransient, errorhandling.BlameDestination, "timeout")
	// The stream is read in the background after the timeout.
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := tr.Deliver(ctx, message(t))
		if v := errorhandling.NewErrorClassifier().Classify(err); v.Code == "no_ack" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Deliver to a no_ack stream still fails with %v 5 s after the first timeout, publishing each time", err)
		}
	}
	before, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		start := time.Now()
		wantFault(t, tr.Deliver(ctx, message(t)), errorhandling.ClassTransient, errorhandling.BlameDestination, "no_ack")
		if took := time.Since(start); took >= timeout/2 {
			t.Fatalf("Deliver #%d to the known no_ack stream took %v (Timeout %v)", i+1, took, timeout)
		}
	}
	after, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.State.Msgs != before.State.Msgs {
		t.Fatalf("three refused Delivers stored %d messages", after.State.Msgs-before.State.Msgs)
	}

	cfg := s.CachedInfo().Config
	cfg.NoAck = false
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(5 * time.Second)
	for err = tr.Deliver(ctx, message(t)); err != nil; err = tr.Deliver(ctx, message(t)) {
		if time.Now().After(deadline) {
			t.Fatalf("Deliver still fails 5 s after no_ack was turned off: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // the stream is read again once Timeout has passed
	}
}
