package rabbitinbox

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/backstophq/backstop/outbox"
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
	msg, dropped := received(d, outbox.Limits{}.WithDefaults())
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
		msg, dropped := received(d, outbox.Limits{}.WithDefaults())
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

// TestReceivedKeepsTheMessageOverTheHeaderLimits: a delivery with more
// headers, or more header bytes, than the inbox's limits keeps the message
// with the headers that fit; the others are left out and named. The whole
// message was refused (rejected without requeue: lost).
func TestReceivedKeepsTheMessageOverTheHeaderLimits(t *testing.T) {
	limits := outbox.Limits{MaxHeaders: 4, MaxHeaderBytes: 100}.WithDefaults()
	table := amqp.Table{"X-Big": strings.Repeat("b", 80)} // 85 bytes, then 5 a header
	for i := range 10 {
		table[fmt.Sprintf("X-H%d", i)] = "v"
	}
	msg, dropped := received(&amqp.Delivery{MessageId: "m1", Type: "t", Body: []byte(`{}`), Headers: table}, limits)
	if len(msg.Headers) != 4 || len(msg.Headers)+len(dropped) != 11 {
		t.Errorf("kept %q, left out %q: want 4 kept and 7 left out", msg.Headers, dropped)
	}
	m := &outbox.Message{Destination: "d", Type: msg.Type, Payload: msg.Payload, Headers: msg.Headers}
	if err := m.PrepareLimits(limits); err != nil {
		t.Errorf("the kept headers are over the limits: %v", err)
	}
}

// FuzzReceived: whatever a publisher puts in a delivery's properties and
// header table, the headers received keeps are ones a message can carry
// within the inbox's limits, so a message is never refused (and lost) for
// a header: with valid id, type and body it can always be stored.
func FuzzReceived(f *testing.F) {
	f.Add("application/json", "x-tenant", "acme", "X-TENANT", "other", 3, 10)
	f.Add("text/plain; charset=\xe9", "content-type", "text/csv", "backstop-stream", "s", 0, 0)
	f.Add("", "my header", "v", "X-Tab", "a\tb", 70, 300)
	f.Add("a\r\n", "\xff", "\x00", "Backstop-Inbox-Id", "forged", 1, 20000)
	limits := outbox.Limits{}.WithDefaults()
	f.Fuzz(func(t *testing.T, ctype, k1, v1, k2, v2 string, many, size int) {
		table := amqp.Table{k1: v1, k2: v2}
		for i := range min(max(many, 0), 200) {
			table[fmt.Sprintf("x-%d", i)] = strings.Repeat("v", min(max(size, 0), 1<<16)/max(many, 1))
		}
		d := &amqp.Delivery{MessageId: "m1", Type: "t", ContentType: ctype, Body: []byte(`{}`), Headers: table}
		msg, dropped := received(d, limits)
		for k, v := range msg.Headers {
			if err := outbox.CheckHeader(k, v); err != nil {
				t.Fatalf("kept header %q: %q the message cannot carry: %v", k, v, err)
			}
		}
		if got := len(msg.Headers) + len(dropped); got > len(table)+1 {
			t.Fatalf("%d headers kept or left out of %d given", got, len(table)+1)
		}
		m := &outbox.Message{Destination: "d", Type: msg.Type, Payload: msg.Payload, Headers: msg.Headers}
		if err := m.PrepareLimits(limits); err != nil {
			t.Fatalf("a message with the headers kept cannot be stored: %v", err)
		}
	})
}
