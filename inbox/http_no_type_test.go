package inbox

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/backstophq/backstop/dlq"
)

// A correctly signed request without a type (no Backstop-Type header and
// a body that is not a JSON object with a "type") cannot be stored, and
// is answered 400: but, as every message the inbox refuses, it must be
// kept first as a dead letter of the inbox's destination, for a sender
// with no dead-letter queue of its own (a Standard Webhooks sender other
// than Backstop) loses it with the 400. The HTTP receiver answered 400
// without keeping anything, where the RabbitMQ receiver parks the same
// message (an empty type and routing key).
func TestHTTPMessageWithoutTypeIsKeptAsDeadLetter(t *testing.T) {
	forEachStore(t, func(t *testing.T, k kind) {
		e := newEnv(t, k)
		in := e.newInbox(e.config())
		h, err := in.HTTPHandler(HTTPConfig{Secrets: [][]byte{[]byte(secret)}})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 { // refused again: kept once
			w := httptest.NewRecorder()
			h.ServeHTTP(w, signed(t, secret, "untyped-1", e.clk.Now(), []byte(`not json`), nil))
			if w.Code != http.StatusBadRequest {
				t.Fatalf("a message without a type: %d %q, want 400", w.Code, w.Body.String())
			}
		}
		es, err := e.s.DLQ().List(e.ctx, &dlq.Filters{Destination: Destination("orders")})
		if err != nil {
			t.Fatal(err)
		}
		if len(es) != 1 {
			t.Fatalf("%d dead letters for the refused message, want 1: a signed message answered 400 is lost to a sender without a dead-letter queue", len(es))
		}
		got, err := e.s.DLQ().Get(e.ctx, es[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		if string(got.Payload) != "not json" || got.Metadata["source_id"] != `"untyped-1"` {
			t.Fatalf("entry payload %q, source_id %v", got.Payload, got.Metadata["source_id"])
		}
		if n := counter(t, e.reg, "backstop_inbox_rejected_total", "inbox", "orders", "source", "http"); n != 2 {
			t.Errorf("rejected_total = %d, want 2", n)
		}
	})
}
