package rabbitmq_test

import (
	"testing"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/transport/rabbitmq"
)

// TestReservedHeadersAreDropped: a message's CC, x-delay or x-death does
// not reach the broker unless the destination allows it.
func TestReservedHeadersAreDropped(t *testing.T) {
	t.Parallel()
	a := connect(t)
	ex := a.exchange(unique("bt.ex"))
	_, raw := a.readBack(a.queue(ex, "order.created", nil))
	_, audit := a.readBack(a.queue(ex, "audit", nil))
	ctx := ctxFor(t)

	strict := newTransport(t, rabbitmq.Config{Exchange: ex})
	m := message(t)
	m.Headers = map[string]string{
		"CC":                     "audit", // as a string the broker refuses the publish
		"x-delay":                "60000",
		"x-death":                "forged",
		"X-Dead-Letter-Exchange": "elsewhere",
		"X-Tenant":               "acme",
	}
	if err := strict.Deliver(ctx, m); err != nil {
		t.Fatalf("Deliver with reserved headers dropped: %v", err)
	}
	d := raw.next(t, ctx)
	for k := range m.Headers {
		_, present := d.Headers[k]
		if present != (k == "X-Tenant") {
			t.Errorf("header %s present = %v (all: %v)", k, present, d.Headers)
		}
	}
	// A fence published to the audit queue after the message: a CC copy,
	// enqueued when the message was confirmed, would arrive before it.
	fence := message(t)
	if err := newTransport(t, rabbitmq.Config{Exchange: ex, RoutingKey: "audit"}).Deliver(ctx, fence); err != nil {
		t.Fatal(err)
	}
	if got := audit.next(t, ctx); got.MessageId != fence.ID.String() {
		t.Fatalf("the audit queue got %s before the fence: CC routed a copy", got.MessageId)
	}

	// Allowed, the broker sees CC and refuses a string where it wants a
	// list: the message's own fault.
	lax := newTransport(t, rabbitmq.Config{Exchange: ex, AllowReservedHeaders: true})
	refused := message(t)
	refused.Headers = map[string]string{"CC": "audit"}
	wantFault(t, lax.Deliver(ctx, refused), errorhandling.ClassPermanent, errorhandling.BlameMessage, "rejected")
}

func TestIsReservedHeader(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		"CC": true, "bcc": true, "x-death": true, "X-Delay": true, "x-match": true, "x-delivery-count": true,
		"x-first-death-reason": true, "x-last-death-queue": true, "x-dead-letter-routing-key": true,
		"x-received-from": true, "x-stream-filter-value": true, "x-deduplication-header": true,
		"X-Tenant": false, "x-trace-id": false, "Backstop-Type": false, "CCX": false, "": false,
	} {
		if got := rabbitmq.IsReservedHeader(name); got != want {
			t.Errorf("IsReservedHeader(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestBackstopHeadersCannotBeForged: a message header named like one of
// Backstop's in another case is dropped (AMQP table keys are
// case-sensitive: it travelled beside the real one).
func TestBackstopHeadersCannotBeForged(t *testing.T) {
	t.Parallel()
	a := connect(t)
	ex := a.exchange(unique("bt.ex"))
	_, raw := a.readBack(a.queue(ex, "order.created", nil))
	ctx := ctxFor(t)
	m := message(t)
	m.Headers = map[string]string{"backstop-message-id": "forged", "BACKSTOP-TYPE": "forged",
		"Backstop-Attempt": "99", "backstop-stream": "forged", "X-Tenant": "acme"}
	if err := newTransport(t, rabbitmq.Config{Exchange: ex}).Deliver(ctx, m); err != nil {
		t.Fatal(err)
	}
	d := raw.next(t, ctx)
	for k, v := range d.Headers {
		if v == "forged" || v == "99" {
			t.Errorf("header %s: %v reached the broker (all: %v)", k, v, d.Headers)
		}
	}
	if d.Headers[rabbitmq.HeaderMessageID] != m.ID.String() || d.Headers["X-Tenant"] != "acme" {
		t.Fatalf("headers %v: want Backstop-Message-Id the message id and X-Tenant kept", d.Headers)
	}
}
