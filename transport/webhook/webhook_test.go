package webhook_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
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
	secret := []byte("whsec_Y29uZm9ybWFuY2Ugc2VjcmV0IGtleSAyNCBieXRlcw==")
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
		Features: transporttest.Features{Headers: true, Ordered: true, ValidatesMessages: true},
		// The transport's own headers; a message's value for them is dropped.
		ReservedHeaders: []string{"webhook-id", "webhook-timestamp", "webhook-signature", "Backstop-Type", "Backstop-Attempt"},
	})
}

func TestConfigIsValidated(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		cfg   webhook.Config
		field string
	}{
		{"no URL", webhook.Config{}, "Config.URL"},
		{"relative URL", webhook.Config{URL: "/hooks"}, "Config.URL"},
		{"other scheme", webhook.Config{URL: "ftp://example.com/x"}, "Config.URL"},
		{"no host", webhook.Config{URL: "http:///x"}, "Config.URL"},
		{"port without host", webhook.Config{URL: "http://:8080/x"}, "Config.URL has no host name"},
		{"port out of range", webhook.Config{URL: "http://127.0.0.1:99999/x"}, `Config.URL has port "99999"`},
		{"port zero", webhook.Config{URL: "https://example.com:0/x"}, `Config.URL has port "0"`},
		{"negative timeout", webhook.Config{URL: "http://x", Timeout: -1}, "Config.Timeout"},
		{"negative body", webhook.Config{URL: "http://x", MaxResponseBody: -1}, "Config.MaxResponseBody"},
		{"negative limit", webhook.Config{URL: "http://x", Limits: outbox.Limits{MaxPayloadBytes: -1}}, "Config.Limits: outbox: invalid limits: Limits.MaxPayloadBytes"},
		{"bad header name", webhook.Config{URL: "http://x", Headers: map[string]string{"a b": "v"}}, "Config.Headers"},
		{"header newline", webhook.Config{URL: "http://x", Headers: map[string]string{"X-A": "v\r\nEvil: 1"}}, "Config.Headers"},
		{"header NUL", webhook.Config{URL: "http://x", Headers: map[string]string{"X-A": "\x00"}}, "Config.Headers"},
		{"headers differing in case", webhook.Config{URL: "http://x", Headers: map[string]string{"X-A": "1", "x-a": "2"}}, `Config.Headers: "X-A" and "x-a" are one HTTP header`},
		{"reserved header", webhook.Config{URL: "http://x", Headers: map[string]string{"backstop-type": "x"}}, "Backstop-Type"},
		{"signature header", webhook.Config{URL: "http://x", Headers: map[string]string{"webhook-signature": "v1,AAAA"}}, "Webhook-Signature"},
		{"HTTP's own header", webhook.Config{URL: "http://x", Headers: map[string]string{"transfer-encoding": "chunked"}}, "Transfer-Encoding is managed by HTTP"},
		{"secret not base64", webhook.Config{URL: "http://x", Secret: []byte("whsec_not base64!")}, "Config.Secret"},
		{"secret empty after prefix", webhook.Config{URL: "http://x", Secret: []byte("whsec_")}, "Config.Secret"},
		{"bad additional secret", webhook.Config{URL: "http://x", Secret: []byte("k"), AdditionalSecrets: [][]byte{[]byte("k2"), []byte("whsec_%%")}}, "Config.AdditionalSecrets[1]"},
		{"empty additional secret", webhook.Config{URL: "http://x", Secret: []byte("k"), AdditionalSecrets: [][]byte{nil}}, "Config.AdditionalSecrets[0]"},
		{"additional without secret", webhook.Config{URL: "http://x", AdditionalSecrets: [][]byte{[]byte("k")}}, "Config.AdditionalSecrets"},
		{"override no status", webhook.Config{URL: "http://x", StatusOverrides: []webhook.StatusOverride{{Class: permanent}}}, "Config.StatusOverrides[0].Status"},
		{"override 2xx", webhook.Config{URL: "http://x", StatusOverrides: []webhook.StatusOverride{{Status: "409", Class: transient}, {Status: "2xx", Class: transient}}}, "Config.StatusOverrides[1].Status"},
		{"override range over 2xx", webhook.Config{URL: "http://x", StatusOverrides: []webhook.StatusOverride{{Status: "100-300", Class: transient}}}, "Config.StatusOverrides[0].Status"},
		{"override backwards", webhook.Config{URL: "http://x", StatusOverrides: []webhook.StatusOverride{{Status: "503-500", Class: transient}}}, "Config.StatusOverrides[0].Status"},
		{"override out of range", webhook.Config{URL: "http://x", StatusOverrides: []webhook.StatusOverride{{Status: "1000", Class: transient}}}, "Config.StatusOverrides[0].Status"},
		{"override bad class", webhook.Config{URL: "http://x", StatusOverrides: []webhook.StatusOverride{{Status: "4xx"}}}, "Config.StatusOverrides[0].Class"},
		{"override recognised", webhook.Config{URL: "http://x", StatusOverrides: []webhook.StatusOverride{{Status: "4xx", Class: errorhandling.ClassRecognised}}}, "Config.StatusOverrides[0].Class"},
		{"override bad blame", webhook.Config{URL: "http://x", StatusOverrides: []webhook.StatusOverride{{Status: "4xx", Class: permanent, Blame: 7}}}, "Config.StatusOverrides[0].Blame"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := webhook.New(c.cfg)
			if err == nil || !strings.Contains(err.Error(), c.field) {
				t.Fatalf("New = %v, want an error naming %s", err, c.field)
			}
			if !errorsIs(err, webhook.ErrInvalidConfig) {
				t.Fatalf("error %v does not match ErrInvalidConfig", err)
			}
		})
	}
	for _, ok := range []webhook.Config{
		{URL: "https://user:pw@example.com/h?token=s3cret"},
		{URL: "http://x", Secret: []byte("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), AdditionalSecrets: [][]byte{[]byte("raw key")}},
		{URL: "http://x", StatusOverrides: []webhook.StatusOverride{{Status: "1xx", Class: transient}, {Status: " 300-399 ", Class: permanent, Blame: msg}, {Status: "999", Class: transient}}},
	} {
		if _, err := webhook.New(ok); err != nil {
			t.Errorf("valid config refused: %v", err)
		}
	}
	_, err := webhook.New(webhook.Config{URL: "ftp://example.com/h?token=s3cret"})
	if strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("config error leaks the URL's token: %v", err)
	}
	_, err = webhook.New(webhook.Config{URL: "http://x", Secret: []byte("whsec_s3cret!")})
	if strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("config error leaks the secret: %v", err)
	}
}
