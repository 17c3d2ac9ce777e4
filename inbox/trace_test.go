package inbox

import (
	"net/http/httptest"
	"testing"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/transport/webhook"
)

// A message Backstop's webhook transport sends with a trace keeps it in
// the inbox, under the name the outbox gives it (outbox.TraceParentHeader),
// whatever HTTPConfig.Headers names: the receiver kept Content-Type only,
// and canonicalised the names it kept ("Traceparent"), so the trace ended
// at the inbox, and a handler reading msg.Headers[outbox.TraceParentHeader]
// found nothing. A malformed traceparent is left out, as one from the
// context or the admin API is.
func TestHTTPKeepsTheTraceOfAWebhook(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, k kind) {
		e := newEnv(t, k)
		in := e.newInbox(e.config())
		h, err := in.HTTPHandler(HTTPConfig{Secrets: [][]byte{[]byte(secret)}})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		tr, err := webhook.New(webhook.Config{URL: srv.URL, Secret: []byte(secret), Clock: e.clk})
		if err != nil {
			t.Fatal(err)
		}
		const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		traced := &outbox.Message{ID: uuid.Must(uuid.NewV7()), Destination: "partner", Type: "order.created",
			Payload: []byte(`{}`), Headers: map[string]string{outbox.TraceParentHeader: tp, "tracestate": "congo=t61rcWkgMzE"}}
		malformed := &outbox.Message{ID: uuid.Must(uuid.NewV7()), Destination: "partner", Type: "order.created",
			Payload: []byte(`{}`), Headers: map[string]string{outbox.TraceParentHeader: "00-not-a-trace"}}
		for _, m := range []*outbox.Message{traced, malformed} {
			if err := tr.Deliver(e.ctx, m); err != nil {
				t.Fatalf("Deliver: %v", err)
			}
		}
		msgs, err := e.s.(store.Admin).ListMessages(e.ctx, store.MessageFilter{Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]map[string]string{}
		for _, m := range msgs {
			got[m.Headers[HeaderID]] = m.Headers
		}
		if h := got[traced.ID.String()]; h[outbox.TraceParentHeader] != tp || h["tracestate"] != "congo=t61rcWkgMzE" {
			t.Errorf("traced message's headers %q: want traceparent %s and tracestate kept", h, tp)
		}
		for _, name := range []string{outbox.TraceParentHeader, "Traceparent"} {
			if v, ok := got[malformed.ID.String()][name]; ok {
				t.Errorf("malformed trace kept as %s: %q, want it left out", name, v)
			}
		}
	})
}
