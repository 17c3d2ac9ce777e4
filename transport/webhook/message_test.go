package webhook_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/transport"
	"github.com/backstophq/backstop/transport/webhook"
)

// TestUnsendableMessageIsPermanentMessageFault: what HTTP cannot carry,
// or what is over the limits, fails before any request, charged to the
// message and never to the destination.
func TestUnsendableMessageIsPermanentMessageFault(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		limits outbox.Limits
		change func(m *outbox.Message)
		says   string
	}{
		{"newline in stream", outbox.Limits{}, func(m *outbox.Message) { m.Stream = "order\n42" }, "stream holds control character U+000A at byte 5"},
		{"NUL in type", outbox.Limits{}, func(m *outbox.Message) { m.Type = "order\x00created" }, "type holds control character U+0000"},
		{"C1 control in stream", outbox.Limits{}, func(m *outbox.Message) { m.Stream = "\u0085" }, "U+0085"},
		{"invalid UTF-8 in type", outbox.Limits{}, func(m *outbox.Message) { m.Type = "\xff" }, "invalid UTF-8"},
		{"header injection", outbox.Limits{}, func(m *outbox.Message) { m.Headers = map[string]string{"X-Note": "a\r\nX-Admin: 1"} }, `header "X-Note" value holds control character U+000D`},
		{"NUL in header value", outbox.Limits{}, func(m *outbox.Message) { m.Headers = map[string]string{"X-Note": "a\x00"} }, "U+0000"},
		{"header name not a token", outbox.Limits{}, func(m *outbox.Message) { m.Headers = map[string]string{"X Note": "a"} }, "not an HTTP token"},
		{"header managed by HTTP", outbox.Limits{}, func(m *outbox.Message) { m.Headers = map[string]string{"transfer-encoding": "chunked"} }, "managed by HTTP"},
		{"host header", outbox.Limits{}, func(m *outbox.Message) { m.Headers = map[string]string{"Host": "evil.example.com"} }, "managed by HTTP"},
		{"headers differing in case", outbox.Limits{}, func(m *outbox.Message) { m.Headers = map[string]string{"X-Tenant": "a", "x-tenant": "b"} }, `headers "X-Tenant" and "x-tenant" are one HTTP header`},
		{"blank around the stream", outbox.Limits{}, func(m *outbox.Message) { m.Stream = " order-42 " }, "stream starts or ends with a blank"},
		{"blank after the type", outbox.Limits{}, func(m *outbox.Message) { m.Type = "order.created " }, "type starts or ends with a blank"},
		{"tab before a header value", outbox.Limits{}, func(m *outbox.Message) { m.Headers = map[string]string{"X-Pad": "\tx"} }, `header "X-Pad" value starts or ends with a blank`},
		{"blank around a header value", outbox.Limits{}, func(m *outbox.Message) { m.Headers = map[string]string{"X-Pad": "  padded"} }, `header "X-Pad" value starts or ends with a blank`},
		{"payload over the default limit", outbox.Limits{}, func(m *outbox.Message) { m.Payload = make([]byte, 1<<20+1) }, "payload is 1048577 bytes, over the limit of 1048576"},
		{"payload over a configured limit", outbox.Limits{MaxPayloadBytes: 16}, func(m *outbox.Message) {}, "over the limit of 16"},
		{"too many headers", outbox.Limits{MaxHeaders: 1}, func(m *outbox.Message) { m.Headers = map[string]string{"A": "1", "B": "2"} }, "over the limit of 1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var requests atomic.Int32
			tr, _ := serve(t, func(w http.ResponseWriter, _ *http.Request) {
				requests.Add(1)
				w.WriteHeader(http.StatusNoContent)
			}, webhook.Config{Limits: c.limits})
			m := message()
			c.change(m)
			err := tr.Deliver(context.Background(), m)
			v := errorhandling.NewErrorClassifier().Classify(err)
			wantVerdict(t, v, permanent, msg, errorhandling.ReasonValidationFailure)
			if v.Code != "invalid_message" || !errors.Is(err, outbox.ErrInvalidMessage) || !errors.Is(err, transport.ErrNotSent) {
				t.Errorf("code %q, error %v: want invalid_message matching outbox.ErrInvalidMessage and transport.ErrNotSent", v.Code, err)
			}
			if !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), m.ID.String()) {
				t.Errorf("error %q: want the message id and %q", err, c.says)
			}
			if n := requests.Load(); n != 0 {
				t.Errorf("%d requests sent for an unsendable message", n)
			}
		})
	}
}

// TestUnicodeIsCarried: printable non-ASCII text in the stream, type and
// header values is sent as UTF-8 and arrives intact.
func TestUnicodeIsCarried(t *testing.T) {
	t.Parallel()
	h, got := capture()
	tr, _ := serve(t, h, webhook.Config{})
	m := message()
	m.Stream, m.Type = "bestilling-æøå-日本", "ordre.opprettet\u2028"
	m.Headers = map[string]string{"X-Name": "Zoë\tO'Brien — 日本"}
	if err := tr.Deliver(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	c := <-got
	for name, want := range map[string]string{webhook.HeaderStream: m.Stream, webhook.HeaderType: m.Type, "X-Name": m.Headers["X-Name"]} {
		if v := c.header.Get(name); v != want {
			t.Errorf("%s = %q, want %q", name, v, want)
		}
	}
}
