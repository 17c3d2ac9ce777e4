package webhook_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/backstophq/backstop/transport"
	"github.com/backstophq/backstop/transport/transporttest"
	"github.com/backstophq/backstop/transport/webhook"
)

// receiver is an httptest destination that checks signatures and records
// what it receives.
func receiver(t *testing.T, secret []byte) (*httptest.Server, *transporttest.Recorder) {
	t.Helper()
	rec := transporttest.NewRecorder()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		headers := make(map[string]string, len(r.Header))
		for k, vs := range r.Header {
			headers[k] = strings.Join(vs, ",")
		}
		rec.Record(transporttest.Delivery{
			ID:      r.Header.Get(webhook.HeaderMessageID),
			Stream:  r.Header.Get(webhook.HeaderStream),
			Type:    r.Header.Get(webhook.HeaderType),
			Payload: body,
			Headers: headers,
		})
		w.WriteHeader(http.StatusNoContent)
	})
	srv := httptest.NewServer(webhook.RequireSignature(secret, 0, h))
	t.Cleanup(srv.Close)
	return srv, rec
}

func TestConformance(t *testing.T) {
	secret := []byte("conformance-secret")
	transporttest.Run(t, transporttest.Harness{
		New: func(t *testing.T) (transport.Transport, transporttest.Receiver) {
			srv, rec := receiver(t, secret)
			tr, err := webhook.New(webhook.Config{URL: srv.URL + "/hooks", Secret: secret})
			if err != nil {
				t.Fatal(err)
			}
			return tr, rec
		},
		// Deliver returns once the receiver answered, so sequential
		// deliveries arrive in order. The receiver does not de-duplicate.
		Features: transporttest.Features{Headers: true, Ordered: true},
	})
}

func TestConfigIsValidated(t *testing.T) {
	for _, c := range []struct {
		name  string
		cfg   webhook.Config
		field string
	}{
		{"no URL", webhook.Config{}, "Config.URL"},
		{"relative URL", webhook.Config{URL: "/hooks"}, "Config.URL"},
		{"other scheme", webhook.Config{URL: "ftp://example.com/x"}, "Config.URL"},
		{"no host", webhook.Config{URL: "http:///x"}, "Config.URL"},
		{"negative timeout", webhook.Config{URL: "http://x", Timeout: -1}, "Config.Timeout"},
		{"negative body", webhook.Config{URL: "http://x", MaxResponseBody: -1}, "Config.MaxResponseBody"},
		{"bad header name", webhook.Config{URL: "http://x", Headers: map[string]string{"a b": "v"}}, "Config.Headers"},
		{"header newline", webhook.Config{URL: "http://x", Headers: map[string]string{"X-A": "v\r\nEvil: 1"}}, "Config.Headers"},
		{"reserved header", webhook.Config{URL: "http://x", Headers: map[string]string{"backstop-signature": "v1=0"}}, "Backstop-Signature"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := webhook.New(c.cfg)
			if err == nil || !strings.Contains(err.Error(), c.field) {
				t.Fatalf("New = %v, want an error naming %s", err, c.field)
			}
			if !errorsIs(err, webhook.ErrInvalidConfig) {
				t.Fatalf("error %v does not match ErrInvalidConfig", err)
			}
		})
	}
	if _, err := webhook.New(webhook.Config{URL: "https://user:pw@example.com/h?token=s3cret"}); err != nil {
		t.Fatalf("valid config refused: %v", err)
	}
	_, err := webhook.New(webhook.Config{URL: "ftp://example.com/h?token=s3cret"})
	if strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("config error leaks the URL's token: %v", err)
	}
}
