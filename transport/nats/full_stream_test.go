package natstransport_test

import (
	"bytes"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop/errorhandling"
	natstransport "github.com/backstophq/backstop/transport/nats"
)

// TestFullStreamIsNotTooLargeForAMessageThatFitsIt: a stream with
// max_bytes and a discard-new policy, full, refuses a message that it
// takes once it is empty. The transport told a message larger than the
// whole stream apart from a full stream by reckoning subject, headers,
// payload and 16 bytes against max_bytes; a server that counts less
// (nats-server 2.9 counts headers and payload) takes a message within
// that margin of the limit, and the transport dead-lettered it as
// message_too_large while the stream was merely full.
func TestFullStreamIsNotTooLargeForAMessageThatFitsIt(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	const limit = 1024
	s, prefix := newStream(t, js, jetstream.StreamConfig{MaxBytes: limit, Discard: jetstream.DiscardNew})
	tr := newTransport(t, natstransport.Config{Subject: prefix + ".{type}"})
	ctx := ctxFor(t)

	// The transport's headers take about 200 bytes and the subject 49: an
	// 800-byte payload is over the limit by subject, headers, payload and
	// 16 (about 1,064), and under it by headers and payload (about 1,000).
	big := message(t)
	big.Payload = bytes.Repeat([]byte("x"), 800)
	small := message(t)
	small.Payload = bytes.Repeat([]byte("y"), 100)
	if err := tr.Deliver(ctx, small); err != nil {
		t.Fatalf("Deliver to the empty stream = %v", err)
	}
	err := tr.Deliver(ctx, big)
	if err == nil {
		t.Fatal("Deliver to the full stream = nil")
	}
	v := errorhandling.NewErrorClassifier().Classify(err)
	if err := s.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	fits := tr.Deliver(ctx, big) == nil
	if fits && (v.Class != errorhandling.ClassTransient || v.Blame != errorhandling.BlameDestination) {
		t.Fatalf("the full stream's refusal (%v) classified %v, %v, %q: dead-lettered, though the stream takes the message once it has room",
			err, v.Class, v.Blame, v.Code)
	}
	if !fits {
		t.Logf("this server does not take the message in the empty stream either: %v classified %v", err, v.Code)
	}
}
