package rabbitinbox

import (
	"github.com/backstophq/backstop/outbox"
	"maps"
	"slices"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// A delivery's headers as any publisher sets them: the message keeps the
// ones it can carry, canonically spelled, and leaves out the others
// instead of being refused whole (rejected without requeue: gone).
func TestReceivedKeepsTheHeadersAMessageCanCarry(t *testing.T) {
	d := &amqp.Delivery{MessageId: "m1", Type: "t", ContentType: "application/json", Body: []byte(`{}`),
		Headers: amqp.Table{
			"x-tenant":               "acme",
			"X-TENANT":               "other", // the same name spelled again: the first in name order wins
			"content-type":           "text/plain",
			"x-exception-stacktrace": "java.lang.RuntimeException: boom\n\tat com.acme.Foo.bar(Foo.java:1)\n",
			"my header":              "v",
			"ns:key":                 "v",
			"X-Count":                int32(3),
			"X-Tab":                  "a\tb",
			"Backstop-Stream":        "s-1",
		}}
	msg, dropped := received(d)
	want := map[string]string{"X-Tenant": "other", "Content-Type": "application/json", "X-Tab": "a\tb"}
	if !maps.Equal(msg.Headers, want) {
		t.Errorf("headers %q, want %q", msg.Headers, want)
	}
	slices.Sort(dropped)
	if w := []string{"content-type", "my header", "ns:key", "x-exception-stacktrace", "x-tenant"}; !slices.Equal(dropped, w) {
		t.Errorf("left out %q, want %q", dropped, w)
	}
	if msg.Stream != "s-1" || msg.ID != "m1" || msg.Type != "t" {
		t.Errorf("id, type, stream = %q, %q, %q", msg.ID, msg.Type, msg.Stream)
	}
}

// TestReceivedLeavesOutAContentTypeItCannotCarry: a content-type property
// with invalid UTF-8 or a line break is left out, as any such header is,
// instead of making the message invalid (it was rejected without requeue:
// lost); a valid content-type table header then stands in for it.
func TestReceivedLeavesOutAContentTypeItCannotCarry(t *testing.T) {
	for _, ct := range []string{"text/plain; charset=\xe9", "application/json\r\n"} {
		d := &amqp.Delivery{MessageId: "m1", Type: "t", ContentType: ct, Body: []byte(`{}`),
			Headers: amqp.Table{"content-type": "text/csv"}}
		msg, dropped := received(d)
		if want := map[string]string{"Content-Type": "text/csv"}; !maps.Equal(msg.Headers, want) {
			t.Errorf("content type %q: headers %q, want %q", ct, msg.Headers, want)
		}
		if len(dropped) != 1 {
			t.Errorf("content type %q: left out %q, want the property named", ct, dropped)
		}
		for k, v := range msg.Headers {
			if err := outbox.CheckHeader(k, v); err != nil {
				t.Errorf("content type %q: kept header %s the message cannot carry: %v", ct, k, err)
			}
		}
	}
}
