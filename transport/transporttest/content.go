package transporttest

import (
	"maps"
	"testing"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
)

// testUnicode: printable non-ASCII text (and U+2028, which is not a
// control character) in the stream and in header values arrives intact.
func testUnicode(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.message("bestilling-æøå-日本\u2028", 1)
	want := map[string]string{"X-Name": "Zoë\tO'Brien — 日本"}
	if h.Features.Headers {
		m.Headers = maps.Clone(want)
	}
	e.deliver(m)
	d := find(t, e.wait(1), m.ID)
	sameMessage(t, d, m)
	for k, v := range m.Headers {
		if got, ok := header(d.Headers, k); !ok || got != v {
			t.Errorf("header %s = %q (present %v), want %q", k, got, ok, v)
		}
	}
}

// unsendable lists messages that outbox validation refuses, by what is
// wrong with them.
var unsendable = map[string]func(m *outbox.Message){
	"newline in stream":       func(m *outbox.Message) { m.Stream = "order\n42" },
	"NUL in type":             func(m *outbox.Message) { m.Type = "transporttest.\x00event" },
	"invalid UTF-8 in stream": func(m *outbox.Message) { m.Stream = "order-\xff" },
	"C1 control in stream":    func(m *outbox.Message) { m.Stream = "order-\u0085" },
	"header line break":       func(m *outbox.Message) { m.Headers = map[string]string{"X-Note": "a\r\nX-Admin: 1"} },
	"NUL in header value":     func(m *outbox.Message) { m.Headers = map[string]string{"X-Note": "a\x00b"} },
	"header name with space":  func(m *outbox.Message) { m.Headers = map[string]string{"X Note": "a"} },
	"header name with colon":  func(m *outbox.Message) { m.Headers = map[string]string{"X-Note:": "a"} },
	"payload over the limit":  func(m *outbox.Message) { m.Payload = make([]byte, outbox.DefaultMaxPayloadBytes+1) },
}

// testUnsendable: a message outbox validation refuses fails before
// anything is sent, as a permanent fault of the message.
func testUnsendable(t *testing.T, h Harness) {
	if !h.Features.ValidatesMessages {
		t.Skip("transport does not check messages (Features.ValidatesMessages)")
	}
	e := newEnv(t, h)
	classifier := errorhandling.NewErrorClassifier()
	var sent []*outbox.Message
	for name, change := range unsendable {
		m := e.message("unsendable", 1)
		change(m)
		err := e.tr.Deliver(e.ctx, m)
		v := classifier.Classify(err)
		if v.Class != errorhandling.ClassPermanent || v.Blame != errorhandling.BlameMessage {
			t.Errorf("%s: Deliver = %v, classified %s/%s; want a permanent fault of the message", name, err, v.Class, v.Blame)
		}
		sent = append(sent, m)
	}
	got := e.fence()
	for _, m := range sent {
		if n := count(got, m.ID); n != 0 {
			t.Errorf("an unsendable message arrived %d times", n)
		}
	}
}

// testReservedHeaders: the headers of Harness.ReservedHeaders a message
// carries do not reach the destination with the message's value; its
// other headers do.
func testReservedHeaders(t *testing.T, h Harness) {
	if len(h.ReservedHeaders) == 0 || !h.Features.Headers {
		t.Skip("no reserved headers (Harness.ReservedHeaders) or no headers (Features.Headers)")
	}
	e := newEnv(t, h)
	m := e.message("reserved", 1)
	const forged = "set-by-the-message"
	m.Headers = map[string]string{"X-Tenant": "acme"}
	for _, name := range h.ReservedHeaders {
		m.Headers[name] = forged
	}
	e.deliver(m)
	d := find(t, e.wait(1), m.ID)
	if v, ok := header(d.Headers, "X-Tenant"); !ok || v != "acme" {
		t.Errorf("X-Tenant = %q (present %v), want acme", v, ok)
	}
	for _, name := range h.ReservedHeaders {
		if v, ok := header(d.Headers, name); ok && v == forged {
			t.Errorf("reserved header %s arrived with the message's value", name)
		}
	}
}

// blankEdged lists messages holding text that starts or ends with a blank
// (a space or a tab), which outbox validation allows and some protocols
// drop: HTTP trims a header value's blanks, NATS clients trim a header
// value's leading ones.
var blankEdged = map[string]func(m *outbox.Message){
	"stream with a leading space":        func(m *outbox.Message) { m.Stream = " order-42" },
	"stream with a trailing tab":         func(m *outbox.Message) { m.Stream = "order-42\t" },
	"type with a leading tab":            func(m *outbox.Message) { m.Type = "\ttransporttest.event" },
	"header value with a leading space":  func(m *outbox.Message) { m.Headers = map[string]string{"X-Note": " padded"} },
	"header value with a trailing space": func(m *outbox.Message) { m.Headers = map[string]string{"X-Note": "padded "} },
}

// testBlankEdges: a message whose stream, type or header value starts or
// ends with a blank either arrives with that text as it was sent, or is
// refused as a permanent fault of the message and does not arrive; it is
// never delivered altered.
func testBlankEdges(t *testing.T, h Harness) {
	e := newEnv(t, h)
	classifier := errorhandling.NewErrorClassifier()
	sent := map[string]*outbox.Message{}
	for name, change := range blankEdged {
		m := e.message("blank-edges", 1)
		change(m)
		if m.Headers != nil && !h.Features.Headers {
			continue
		}
		if err := e.tr.Deliver(e.ctx, m); err != nil {
			if v := classifier.Classify(err); v.Class != errorhandling.ClassPermanent || v.Blame != errorhandling.BlameMessage {
				t.Errorf("%s: Deliver = %v, classified %s/%s; want nil or a permanent fault of the message", name, err, v.Class, v.Blame)
			}
			m.Payload = nil // refused: must not arrive
		}
		sent[name] = m
	}
	got := e.fence()
	for name, m := range sent {
		n := count(got, m.ID)
		switch {
		case m.Payload == nil && n != 0:
			t.Errorf("%s: refused, yet arrived %d times", name, n)
		case m.Payload == nil:
		case n == 0:
			t.Errorf("%s: delivered, yet did not arrive", name)
		default:
			d := find(t, got, m.ID)
			sameMessage(t, d, m)
			for k, v := range m.Headers {
				if got, ok := header(d.Headers, k); !ok || got != v {
					t.Errorf("%s: header %s = %q (present %v), want %q", name, k, got, ok, v)
				}
			}
		}
	}
}
