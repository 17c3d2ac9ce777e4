package inbox

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/backstophq/backstop/transport/webhook"
)

// The HTTP receiver mounted behind a request-size middleware
// (http.MaxBytesReader) with a limit under its MaxBody: a body over that
// limit was answered 408, "send it again", which Backstop's webhook
// transport retries as the destination's fault for ever (every try is
// over the limit again), where a body over a limit is 413, dead-lettered
// on the sender's side.
func TestHTTPBodyOverAnOuterLimitIs413(t *testing.T) {
	e := newEnv(t, kinds[0])
	in := e.newInbox(e.config())
	h, err := in.HTTPHandler(HTTPConfig{Secrets: [][]byte{[]byte(secret)}})
	if err != nil {
		t.Fatal(err)
	}
	limited := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 100)
		h.ServeHTTP(w, r)
	})
	w := httptest.NewRecorder()
	limited.ServeHTTP(w, signed(t, secret, "big-1", e.clk.Now(), bytes.Repeat([]byte("x"), 200),
		map[string]string{webhook.HeaderType: "order.created"}))
	if w.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("a body over the server's own limit: %d %q, want 413 (a 408 is retried for ever as the destination's fault)",
			w.Code, w.Body.String())
	}
}
