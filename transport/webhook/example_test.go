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

// A receiver checks a request with what it got: the webhook-id,
// webhook-timestamp and webhook-signature headers and the raw body.
func ExampleVerify() {
	secret := []byte("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	sentAt := time.Unix(1741964966, 0)
	body := []byte(`{"order":42}`)
	h := http.Header{}
	h.Set("webhook-id", "01963f6e-8a4b-7c3d-9e2f-0123456789ab")
	h.Set("webhook-timestamp", "1741964966")
	sig, _ := webhook.Sign(secret, h.Get("webhook-id"), h.Get("webhook-timestamp"), body) // what the sender did
	h.Set("webhook-signature", sig)

	now := sentAt.Add(3 * time.Second) // the receiver's clock
	fmt.Println(webhook.Verify(secret, h, body, now, 5*time.Minute))
	fmt.Println(webhook.Verify(secret, h, []byte(`{"order":43}`), now, 5*time.Minute))
	fmt.Println(webhook.Verify(secret, h, body, sentAt.Add(time.Hour), 5*time.Minute))
	// Output:
	// <nil>
	// webhook: invalid signature: signature does not match
	// webhook: invalid signature: timestamp outside the tolerance: sent 1h0m0s from now
}

func ExampleNew() {
	secret := []byte("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Println(r.Method, r.URL.Path, string(body))
		for _, h := range []string{"Content-Type", "webhook-id", "webhook-timestamp", "webhook-signature",
			webhook.HeaderStream, webhook.HeaderType, webhook.HeaderAttempt} {
			fmt.Printf("%s: %s\n", h, r.Header.Get(h))
		}
		fmt.Println("verified:", webhook.Verify(secret, r.Header, body, time.Unix(1741964970, 0), 0))
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()

	tr, err := webhook.New(webhook.Config{
		URL:     srv.URL + "/hooks/orders",
		Secret:  secret,
		Timeout: 5 * time.Second,
		Clock:   clock.NewFake(time.Unix(1741964966, 0)), // for a fixed webhook-timestamp
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tr.Close()

	err = tr.Deliver(context.Background(), &outbox.Message{
		ID:          uuid.MustParse("01963f6e-8a4b-7c3d-9e2f-0123456789ab"),
		Destination: "orders",
		Stream:      "order-42",
		Type:        "order.created",
		Payload:     []byte(`{"order":42}`),
	})
	fmt.Println("delivered:", err == nil)
	// Output:
	// POST /hooks/orders {"order":42}
	// Content-Type: application/json
	// webhook-id: 01963f6e-8a4b-7c3d-9e2f-0123456789ab
	// webhook-timestamp: 1741964966
	// webhook-signature: v1,BzilAk2cqfR5E+0ckD+pDydk2ITK6c4KfZvAJ4j4Cc4=
	// Backstop-Stream: order-42
	// Backstop-Type: order.created
	// Backstop-Attempt: 1
	// verified: <nil>
	// delivered: true
}

// What a failed delivery tells the relay: a 429 is a transient fault of
// the destination, to be retried no sooner than its Retry-After; a 401 (a
// key the destination no longer accepts) is the destination's too, so the
// message waits instead of being dead-lettered; a 422 is the message's.
func ExampleTransport_Deliver_failures() {
	for _, status := range []int{http.StatusTooManyRequests, http.StatusUnauthorized, http.StatusUnprocessableEntity} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "7")
			http.Error(w, "no", status)
		}))
		tr, _ := webhook.New(webhook.Config{URL: srv.URL + "/hooks"})
		err := tr.Deliver(context.Background(), &outbox.Message{Destination: "orders", Type: "order.created", Payload: []byte(`{}`)})
		v := errorhandling.NewErrorClassifier().Classify(err)
		fmt.Printf("%d: class=%s blame=%s code=%s retry-after=%v\n", status, v.Class, v.Blame, v.Code, v.RetryAfter)
		_ = tr.Close()
		srv.Close()
	}
	// Output:
	// 429: class=transient blame=destination code=rate_limit retry-after=7s
	// 401: class=transient blame=destination code=unauthorized retry-after=7s
	// 422: class=permanent blame=message code=http_422 retry-after=7s
}

// A receiver in Go wraps its handler: requests with a bad or stale
// signature are answered 401 before the handler runs. The handler
// de-duplicates on webhook-id, since delivery is at least once.
func ExampleRequireSignature() {
	secret := []byte("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw") // in production, from the environment
	seen := map[string]bool{}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body) // still readable after verification
		id := r.Header.Get("webhook-id")
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

	for _, key := range []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_d3Jvbmcta2V5LXdyb25nLWtleQ=="} {
		tr, _ := webhook.New(webhook.Config{URL: srv.URL + "/hooks/orders", Secret: []byte(key)})
		err := tr.Deliver(context.Background(), &outbox.Message{Destination: "orders", Type: "order.created", Payload: []byte(`{"order":42}`)})
		var se *webhook.StatusError
		if errors.As(err, &se) {
			fmt.Printf("%s -> %s: %s\n", key[:10], se.Status, se.Body)
		} else {
			fmt.Println(key[:10], "->", err)
		}
		_ = tr.Close()
	}
	// Output:
	// processing order.created {"order":42}
	// whsec_MfKQ -> <nil>
	// whsec_d3Jv -> 401 Unauthorized: webhook: invalid signature: signature does not match
}
