package webhook_test

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/transport/webhook"
)

// capture returns a handler that sends each request's headers and body to
// the returned channel and answers 204.
func capture() (http.HandlerFunc, <-chan captured) {
	ch := make(chan captured, 8)
	return func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ch <- captured{r.Method, r.Header.Clone(), body}
		w.WriteHeader(http.StatusNoContent)
	}, ch
}

type captured struct {
	method string
	header http.Header
	body   []byte
}

func TestRequestHeaders(t *testing.T) {
	t.Parallel()
	h, got := capture()
	secret := []byte("whsec_c2VjcmV0LWtleS1mb3ItdGhlLWhlYWRlcnMtdGVzdA==")
	tr, fake := serve(t, h, webhook.Config{
		Secret:  secret,
		Headers: map[string]string{"Authorization": "Bearer config", "X-Env": "prod"},
	})
	fake.Advance(42 * time.Second)
	m := message()
	m.Attempts = 2
	m.Headers = map[string]string{
		"x-tenant":          "acme",
		"X-Env":             "overridden by config",
		"webhook-id":        "forged",
		"Webhook-Signature": "v1,forged",
		"Backstop-Type":     "forged",
	}
	if err := tr.Deliver(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	c := <-got
	ts := strconv.FormatInt(epoch.Add(42*time.Second).Unix(), 10)
	for name, want := range map[string]string{
		"Content-Type":        "application/json",
		"User-Agent":          "Backstop-Webhook/1",
		"Authorization":       "Bearer config",
		"X-Env":               "prod",
		"X-Tenant":            "acme",
		"webhook-id":          m.ID.String(),
		"webhook-timestamp":   ts,
		webhook.HeaderStream:  "order-42",
		webhook.HeaderType:    "order.created",
		webhook.HeaderAttempt: "3",
		"Backstop-Message-Id": "", // replaced by webhook-id
		"Backstop-Timestamp":  "",
		"Backstop-Signature":  "",
	} {
		v := c.header.Values(name)
		if (want == "" && len(v) != 0) || (want != "" && (len(v) != 1 || v[0] != want)) {
			t.Errorf("%s = %q, want %q", name, v, want)
		}
	}
	if c.method != http.MethodPost || string(c.body) != string(m.Payload) {
		t.Errorf("request %s %q, want POST of the payload", c.method, c.body)
	}
	sig := c.header.Get(webhook.HeaderSignature)
	if !strings.HasPrefix(sig, "v1,") || strings.Contains(sig, " ") {
		t.Errorf("webhook-signature = %q, want one v1 signature", sig)
	}
	if err := webhook.Verify(secret, c.header, c.body, fake.Now(), time.Minute); err != nil {
		t.Errorf("Verify = %v", err)
	}
}

func TestContentTypeAndStreamOptional(t *testing.T) {
	t.Parallel()
	h, got := capture()
	tr, _ := serve(t, h, webhook.Config{})
	m := message()
	m.Stream = ""
	m.Headers = map[string]string{"content-type": "application/cloudevents+json"}
	if err := tr.Deliver(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	c := <-got
	if ct := c.header.Get("Content-Type"); ct != "application/cloudevents+json" {
		t.Errorf("Content-Type = %q", ct)
	}
	if _, ok := c.header[webhook.HeaderStream]; ok {
		t.Errorf("%s sent for a message without a stream", webhook.HeaderStream)
	}
	if _, ok := c.header[webhook.HeaderSignature]; ok {
		t.Errorf("%s sent without a secret", webhook.HeaderSignature)
	}
	if c.header.Get(webhook.HeaderTimestamp) == "" || c.header.Get(webhook.HeaderMessageID) == "" {
		t.Errorf("webhook-id or webhook-timestamp missing: %v", c.header)
	}
}
