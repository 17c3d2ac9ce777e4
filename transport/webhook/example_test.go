package webhook_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/transport/webhook"
)

// A receiver checks a request with the three things it got: the
// Backstop-Timestamp header, the Backstop-Signature header and the raw
// body.
func ExampleVerify() {
	secret := []byte("whsec_example")
	sentAt := time.Unix(1741964966, 0)
	timestamp := "1741964966"
	body := []byte(`{"order":42}`)
	signature := webhook.Sign(secret, timestamp, body) // what the sender put in Backstop-Signature

	now := sentAt.Add(3 * time.Second) // the receiver's clock
	fmt.Println(webhook.Verify(secret, timestamp, signature, body, now, 5*time.Minute))
	fmt.Println(webhook.Verify(secret, timestamp, signature, []byte(`{"order":43}`), now, 5*time.Minute))
	fmt.Println(webhook.Verify(secret, timestamp, signature, body, sentAt.Add(time.Hour), 5*time.Minute))
	// Output:
	// <nil>
	// webhook: invalid signature: signature does not match
	// webhook: invalid signature: timestamp outside the tolerance: sent 1h0m0s from now
}

func ExampleNew() {
	secret := []byte("whsec_example")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Println(r.Method, r.URL.Path, string(body))
		for _, h := range []string{"Content-Type", webhook.HeaderMessageID, webhook.HeaderStream,
			webhook.HeaderType, webhook.HeaderAttempt, webhook.HeaderTimestamp} {
			fmt.Printf("%s: %s\n", h, r.Header.Get(h))
		}
		ts, sig := r.Header.Get(webhook.HeaderTimestamp), r.Header.Get(webhook.HeaderSignature)
		fmt.Println("signature:", webhook.Verify(secret, ts, sig, body, time.Unix(1741964970, 0), 0))
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()

	tr, err := webhook.New(webhook.Config{
		URL:     srv.URL + "/hooks/orders",
		Secret:  secret,
		Timeout: 5 * time.Second,
		Clock:   clock.NewFake(time.Unix(1741964966, 0)), // for a fixed Backstop-Timestamp
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tr.Close()

	err = tr.Deliver(context.Background(), &outbox.Message{
		ID:      uuid.MustParse("01963f6e-8a4b-7c3d-9e2f-0123456789ab"),
		Stream:  "order-42",
		Type:    "order.created",
		Payload: []byte(`{"order":42}`),
	})
	fmt.Println("delivered:", err == nil)
	// Output:
	// POST /hooks/orders {"order":42}
	// Content-Type: application/json
	// Backstop-Message-Id: 01963f6e-8a4b-7c3d-9e2f-0123456789ab
	// Backstop-Stream: order-42
	// Backstop-Type: order.created
	// Backstop-Attempt: 1
	// Backstop-Timestamp: 1741964966
	// signature: <nil>
	// delivered: true
}

// What a failed delivery tells the relay: a 429 is a transient fault of
// the destination, to be retried no sooner than its Retry-After.
func ExampleTransport_Deliver_rateLimited() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "7")
		http.Error(w, "rate limit: 100 requests per minute", http.StatusTooManyRequests)
	}))
	defer srv.Close()
	tr, _ := webhook.New(webhook.Config{URL: srv.URL + "/hooks"})
	defer tr.Close()

	err := tr.Deliver(context.Background(), &outbox.Message{Type: "order.created", Payload: []byte(`{}`)})
	v := errorhandling.NewErrorClassifier().Classify(err)
	fmt.Printf("class=%s retryable=%t blame=%s code=%s retry-after=%v\n", v.Class, v.Retryable, v.Blame, v.Code, v.RetryAfter)
	// Output:
	// class=transient retryable=true blame=destination code=rate_limit retry-after=7s
}

// A receiver in Go wraps its handler: requests with a bad or stale
// signature are answered 401 before the handler runs. The handler
// de-duplicates on Backstop-Message-Id, since delivery is at least once.
func ExampleRequireSignature() {
	secret := []byte("whsec_example") // in production, from the environment
	seen := map[string]bool{}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body) // still readable after verification
		id := r.Header.Get(webhook.HeaderMessageID)
		if !seen[id] {
			seen[id] = true
			fmt.Printf("processing %s %s\n", r.Header.Get(webhook.HeaderType), body)
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux := http.NewServeMux()
	mux.Handle("POST /hooks/orders", webhook.RequireSignature(secret, 5*time.Minute, handler))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for _, key := range []string{"whsec_example", "whsec_wrong"} {
		tr, _ := webhook.New(webhook.Config{URL: srv.URL + "/hooks/orders", Secret: []byte(key)})
		err := tr.Deliver(context.Background(), &outbox.Message{Type: "order.created", Payload: []byte(`{"order":42}`)})
		var se *webhook.StatusError
		if errors.As(err, &se) {
			fmt.Printf("%s -> %s: %s\n", key, se.Status, se.Body)
		} else {
			fmt.Println(key, "->", err)
		}
		_ = tr.Close()
	}
	// Output:
	// processing order.created {"order":42}
	// whsec_example -> <nil>
	// whsec_wrong -> 401 Unauthorized: webhook: invalid signature: signature does not match
}
