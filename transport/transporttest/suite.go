// Package transporttest is the conformance suite every transport.Transport
// runs, in the manner of Watermill's pub/sub tests.
//
// A transport package wires it from a _test.go file:
//
//	func TestConformance(t *testing.T) {
//		transporttest.Run(t, transporttest.Harness{
//			New: func(t *testing.T) (transport.Transport, transporttest.Receiver) {
//				rec := transporttest.NewRecorder()
//				// ... start a destination that calls rec.Record for
//				// every message it receives, and build a transport
//				// that delivers to it ...
//				return tr, rec
//			},
//			Features: transporttest.Features{Headers: true, Ordered: true},
//		})
//	}
//
// Run, Harness, Receiver, Delivery and Features are the stable entry point:
// new checks are added inside the suite, never as new required fields.
//
// The suite never sleeps. It waits for deliveries through
// Receiver.Received under a context deadline (Harness.Timeout), and it
// learns that nothing more is coming by delivering a fence: a last message
// delivered with a live context after the ones under test. Once the fence
// has arrived, a delivery still missing or a duplicate still to come is
// "outside the suite's bounds". For a destination that keeps the order of
// what it accepted (an HTTP server answering synchronously, a queue with
// one consumer) the fence is exact; for others it is the best a test can
// do without sleeping.
//
// # Decisions the suite pins down
//
//   - One Deliver that returns nil makes the message arrive exactly once
//     (unless the destination de-duplicates, which can only lower it).
//   - Deliver on the same message twice (a crash between delivery and the
//     store recording it) makes it arrive twice, or once when
//     Features.Dedup says the destination drops re-sends by message id.
//   - Deliver with a context that is already done returns an error that
//     wraps ctx.Err() (errors.Is(err, context.Canceled)) and delivers
//     nothing: the message does not arrive before the fence. A transport
//     checks ctx before it starts any I/O.
//   - Messages of one stream delivered one after the other (each Deliver
//     returning before the next starts) arrive in that order, when
//     Features.Ordered.
//   - Close returns nil; a second Close must not panic (its error is not
//     checked).
//   - Printable Unicode in the stream and header values arrives intact.
//   - A stream, type or header value that starts or ends with a blank
//     arrives as it was sent, or Deliver refuses it as a permanent fault
//     of the message and it does not arrive: never altered.
//   - When Features.ValidatesMessages, a message outbox validation refuses
//     fails as a permanent fault of the message and nothing arrives.
//   - A message's value for a header of Harness.ReservedHeaders never
//     arrives.
package transporttest

import (
	"context"
	"testing"
	"time"

	"github.com/backstophq/backstop/transport"
)

// Delivery is one message as the destination received it.
type Delivery struct {
	// ID is the message id in its canonical text form (outbox.Message.ID's
	// String()), as the transport passed it on (the webhook's
	// webhook-id header, JetStream's Nats-Msg-Id).
	ID string
	// Stream is the message's stream; empty when it had none.
	Stream string
	// Type is the message's type.
	Type string
	// Payload is the body as received.
	Payload []byte
	// Headers are the headers received with the message. The suite looks
	// names up case-insensitively, so a receiver may report them in any
	// case (such as HTTP's canonical form). Only read when
	// Features.Headers.
	Headers map[string]string
}

// Receiver reads what the destination received.
type Receiver interface {
	// Received waits until at least n deliveries have arrived, then
	// returns every delivery received so far, in arrival order (so it may
	// return more than n). When ctx is done first it returns what has
	// arrived with an error wrapping ctx.Err(). It must wait on ctx and an
	// arrival signal, never by sleeping. It must be safe for concurrent
	// use with the destination recording deliveries. Recorder implements
	// it.
	Received(ctx context.Context, n int) ([]Delivery, error)
}

// Features says what a transport and its destination promise beyond the
// Transport contract. The zero value promises nothing more.
type Features struct {
	// Dedup: the destination drops a re-sent message with an id it has
	// already accepted (JetStream's duplicate window). When false, a
	// re-send arrives again (at least once).
	Dedup bool
	// Headers: outbox.Message.Headers arrive as Delivery.Headers.
	Headers bool
	// Ordered: messages of one stream delivered sequentially arrive in
	// order.
	Ordered bool
	// ValidatesMessages: Deliver refuses a message that outbox
	// validation refuses (a control character in its stream or type, a
	// header that is not a token or holds a line break, a payload over
	// outbox.DefaultMaxPayloadBytes) with a permanent fault of the
	// message, and sends nothing.
	ValidatesMessages bool
}

// Harness adapts one transport to the suite.
type Harness struct {
	// New returns a fresh transport and a Receiver that sees only what that
	// transport delivers (a new server, subject, queue...). It registers
	// the cleanup of everything but the transport with t.Cleanup; the suite
	// closes the transport itself. It fails t when it cannot set up.
	// Required.
	New func(t *testing.T) (transport.Transport, Receiver)
	// Features lists what the transport promises.
	Features Features
	// Timeout bounds each wait for deliveries. Zero means 10 seconds.
	Timeout time.Duration
	// Concurrency is the number of goroutines calling Deliver at once in
	// the concurrency test. Zero means 8.
	Concurrency int
	// Messages is the number of messages of the concurrency test. Zero
	// means 200.
	Messages int
	// ReservedHeaders are header names the transport keeps a message
	// from setting (the broker's own, such as Nats-Expected-Stream): the
	// suite checks that a message's value for them never arrives. Only
	// read when Features.Headers. Nil means none.
	ReservedHeaders []string
}

type testCase struct {
	name string
	fn   func(t *testing.T, h Harness)
}

var cases = []testCase{
	{"SingleDelivery", testSingle},
	{"Headers", testHeaders},
	{"EmptyPayload", testEmptyPayload},
	{"ConcurrentDeliveries", testConcurrent},
	{"StreamOrder", testStreamOrder},
	{"Resend", testResend},
	{"CancelledContext", testCancelled},
	{"Close", testClose},
	{"Unicode", testUnicode},
	{"Unsendable", testUnsendable},
	{"BlankEdges", testBlankEdges},
	{"ReservedHeaders", testReservedHeaders},
}

// Run runs the suite against h. Subtests run in parallel, each on its own
// transport from h.New.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("transporttest: Harness.New is required")
	}
	if h.Timeout <= 0 {
		h.Timeout = 10 * time.Second
	}
	if h.Concurrency <= 0 {
		h.Concurrency = 8
	}
	if h.Messages <= 0 {
		h.Messages = 200
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t, h)
		})
	}
}
