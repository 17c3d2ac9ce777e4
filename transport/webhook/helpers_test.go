package webhook_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/transport/webhook"
)

var errorsIs = errors.Is

// epoch is the fake clock's start.
var epoch = time.Date(2025, 3, 14, 15, 9, 26, 0, time.UTC)

// serve starts h and returns a transport for it, with a fake clock, cfg's
// other fields kept.
func serve(t *testing.T, h http.HandlerFunc, cfg webhook.Config) (*webhook.Transport, *clock.Fake) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	fake := clock.NewFake(epoch)
	if cfg.URL == "" {
		cfg.URL = srv.URL + "/hooks"
	}
	cfg.Clock = fake
	tr, err := webhook.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr, fake
}

// answer returns a handler answering status with body and headers. Its
// Date is the fake clock's start, as a receiver on the sender's clock
// sends (Retry-After dates are read against it).
func answer(status int, body string, headers ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Date", epoch.Format(http.TimeFormat))
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}
}

func message() *outbox.Message {
	return &outbox.Message{
		ID:          uuid.MustParse("01963f6e-8a4b-7c3d-9e2f-0123456789ab"),
		Destination: "orders-webhook",
		Stream:      "order-42",
		Type:        "order.created",
		Payload:     []byte(`{"order":42,"card":"4111-secret-payload"}`),
	}
}

func deliver(t *testing.T, tr *webhook.Transport) (errorhandling.Classification, error) {
	t.Helper()
	err := tr.Deliver(context.Background(), message())
	return errorhandling.NewErrorClassifier().Classify(err), err
}

func wantVerdict(t *testing.T, v errorhandling.Classification, class errorhandling.Class, blame errorhandling.Blame, reason errorhandling.FailureReason) {
	t.Helper()
	if v.Class != class || v.Blame != blame || v.Reason != reason {
		t.Fatalf("verdict = %s/%s/%s (rule %s), want %s/%s/%s", v.Class, v.Blame, v.Reason, v.Rule, class, blame, reason)
	}
	if v.Retryable != (class == errorhandling.ClassTransient) {
		t.Fatalf("Retryable = %v for class %s", v.Retryable, class)
	}
}
