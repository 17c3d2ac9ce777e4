package storetest

import (
	"testing"

	"github.com/backstophq/backstop/outbox"
)

const sampleTraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// testTraceParentFromContext: a W3C traceparent carried by the enqueue's
// context is stored as the message's traceparent header (through Enqueue
// and EnqueueTx), without replacing one the message sets itself.
func testTraceParentFromContext(t *testing.T, h Harness) {
	e := newEnv(t, h)
	ctx := outbox.ContextWithTraceParent(e.ctx, sampleTraceParent)
	plain := &outbox.Message{Destination: "billing", Type: "order.created"}
	own := &outbox.Message{Destination: "billing", Type: "order.created",
		Headers: map[string]string{outbox.TraceParentHeader: "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"}}
	if err := e.s.Enqueue(ctx, plain, own); err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	eq(t, "traceparent from the context", e.get(plain.ID).Headers[outbox.TraceParentHeader], sampleTraceParent)
	eq(t, "the message's own traceparent", e.get(own.ID).Headers[outbox.TraceParentHeader], own.Headers[outbox.TraceParentHeader])

	none := &outbox.Message{Destination: "billing", Type: "order.created"}
	e.enqueue(none)
	if tp, ok := e.get(none.ID).Headers[outbox.TraceParentHeader]; ok {
		t.Fatalf("a message enqueued without trace context has traceparent %q", tp)
	}
}
