package webhook_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/backstophq/backstop/transport/webhook"
)

// The interoperability tests check Backstop against the Standard Webhooks
// specification's own Go library, in both directions, on the wall clock
// (the library checks timestamps against time.Now).

const specSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// libraryReceiver starts a destination that verifies every request with
// each of the library's webhooks and answers 204, or 401 when none of
// them accepts it. The verdicts go to the returned channel.
func libraryReceiver(t *testing.T, whs ...*standardwebhooks.Webhook) (*httptest.Server, <-chan []error) {
	t.Helper()
	verdicts := make(chan []error, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		errs := make([]error, len(whs))
		ok := false
		for i, wh := range whs {
			errs[i] = wh.Verify(body, r.Header)
			ok = ok || errs[i] == nil
		}
		verdicts <- errs
		if !ok {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return srv, verdicts
}

func library(t *testing.T, secret string) *standardwebhooks.Webhook {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	return wh
}

func TestLibraryVerifiesBackstopRequests(t *testing.T) {
	t.Parallel()
	srv, verdicts := libraryReceiver(t, library(t, specSecret))
	tr := newTransport(t, webhook.Config{URL: srv.URL + "/hooks", Secret: []byte(specSecret)})
	for _, payload := range []string{`{"order":42}`, ``, `{"note":"Zoë 日本 \u2028"}`, "not json \x00\xff"} {
		m := message()
		m.Payload = []byte(payload)
		if err := tr.Deliver(context.Background(), m); err != nil {
			t.Fatalf("Deliver %q: %v", payload, err)
		}
		if errs := <-verdicts; errs[0] != nil {
			t.Fatalf("the library refused Backstop's request for %q: %v", payload, errs[0])
		}
	}
}

func TestLibraryVerifiesRotatedKeys(t *testing.T) {
	t.Parallel()
	oldSecret, newSecret := "whsec_b2xkLWtleS1vbGQta2V5LW9sZC1rZXk=", specSecret
	other := library(t, "whsec_b3RoZXIta2V5LW90aGVyLWtleS1vdGhlcg==")
	srv, verdicts := libraryReceiver(t, library(t, oldSecret), library(t, newSecret), other)
	tr := newTransport(t, webhook.Config{URL: srv.URL + "/hooks", Secret: []byte(newSecret),
		AdditionalSecrets: [][]byte{[]byte(oldSecret)}})
	if err := tr.Deliver(context.Background(), message()); err != nil {
		t.Fatal(err)
	}
	errs := <-verdicts
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("the library refused a rotated signature: old key %v, new key %v", errs[0], errs[1])
	}
	if !errors.Is(errs[2], standardwebhooks.ErrNoMatchingSignature) {
		t.Fatalf("the library accepted an unrelated key: %v", errs[2])
	}
}

func TestLibraryVerifiesRawKey(t *testing.T) {
	t.Parallel()
	raw := []byte("a raw key of 24+ bytes, no prefix")
	wh, err := standardwebhooks.NewWebhookRaw(raw)
	if err != nil {
		t.Fatal(err)
	}
	srv, verdicts := libraryReceiver(t, wh)
	tr := newTransport(t, webhook.Config{URL: srv.URL + "/hooks", Secret: raw})
	if err := tr.Deliver(context.Background(), message()); err != nil {
		t.Fatal(err)
	}
	if errs := <-verdicts; errs[0] != nil {
		t.Fatalf("the library refused a raw-key signature: %v", errs[0])
	}
}

func TestLibraryRefusesTamperedRequests(t *testing.T) {
	t.Parallel()
	wh := library(t, specSecret)
	h, got := capture()
	tr, _ := serve(t, h, webhook.Config{Secret: []byte(specSecret)})
	// serve sets a fake clock far from now: the library refuses the
	// timestamp, as a replay.
	if err := tr.Deliver(context.Background(), message()); err != nil {
		t.Fatal(err)
	}
	c := <-got
	if err := wh.Verify(c.body, c.header); !errors.Is(err, standardwebhooks.ErrMessageTooOld) {
		t.Fatalf("library Verify of an old request = %v, want ErrMessageTooOld", err)
	}
	if err := wh.VerifyIgnoringTimestamp(c.body, c.header); err != nil {
		t.Fatalf("library VerifyIgnoringTimestamp = %v", err)
	}
	if err := wh.VerifyIgnoringTimestamp(append(c.body, ' '), c.header); !errors.Is(err, standardwebhooks.ErrNoMatchingSignature) {
		t.Fatalf("library accepted a tampered body: %v", err)
	}
}

// TestBackstopVerifiesLibrarySignatures: a request signed by the library
// passes Verify and RequireSignature.
func TestBackstopVerifiesLibrarySignatures(t *testing.T) {
	t.Parallel()
	wh := library(t, specSecret)
	now := time.Now()
	payload := []byte(`{"order":42}`)
	sig, err := wh.Sign("msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", now, payload)
	if err != nil {
		t.Fatal(err)
	}
	h := headers("msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", strconv.FormatInt(now.Unix(), 10), sig)
	if err := webhook.Verify([]byte(specSecret), h, payload, now, 0); err != nil {
		t.Fatalf("Verify of the library's signature = %v", err)
	}
	// Several entries, the library's among them, as a sender rotating keys.
	h.Set("webhook-signature", "v1,Zm9yZWlnbg== "+sig)
	r := httptest.NewRequest(http.MethodPost, "/hooks", bytes.NewReader(payload))
	r.Header = h
	w := httptest.NewRecorder()
	webhook.RequireSignature([]byte(specSecret), 0, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})).ServeHTTP(w, r)
	if w.Code != http.StatusNoContent {
		t.Fatalf("RequireSignature answered %d: %s", w.Code, w.Body)
	}
}
