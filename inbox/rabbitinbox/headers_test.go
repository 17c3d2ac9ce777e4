package rabbitinbox

import (
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
