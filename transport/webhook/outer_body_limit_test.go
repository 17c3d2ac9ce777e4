package webhook_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/backstophq/backstop/transport/webhook"
)

// RequireSignature behind a request-size middleware (http.MaxBytesReader,
// as chi's RequestSize and many frameworks install it) with a limit under
// MaxVerifyBody: a body over that limit is too large, and will be too
// large on every try. RequireSignature answered it 408 ("the body did not
// arrive whole; send it again"), which Backstop's transport takes for a
// transient fault of the destination: the message is sent again and again,
// its attempts intact, charged to the destination (its breaker), where a
// 413 dead-letters the one message.
func TestRequireSignatureBodyOverAnOuterLimitIs413(t *testing.T) {
	t.Parallel()
	secret := []byte("whsec_c2lkZWNhci1kZW1vLXNpZ25pbmcta2V5IQ==")
	reached := false
	h := webhook.RequireSignature(secret, 0, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		reached = true
		w.WriteHeader(http.StatusNoContent)
	}))
	limited := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 100)
		h.ServeHTTP(w, r)
	})
	body := bytes.Repeat([]byte("x"), 200)
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	sig, err := webhook.Sign(secret, "msg_1", ts, body)
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodPost, "/hooks", bytes.NewReader(body))
	r.Header.Set(webhook.HeaderMessageID, "msg_1")
	r.Header.Set(webhook.HeaderTimestamp, ts)
	r.Header.Set(webhook.HeaderSignature, sig)
	w := httptest.NewRecorder()
	limited.ServeHTTP(w, r)
	if reached {
		t.Fatal("the handler was reached with a body over the limit")
	}
	if w.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("a body over the server's own limit: %d %q, want 413 (a 408 is retried for ever as the destination's fault)",
			w.Code, w.Body.String())
	}
}
