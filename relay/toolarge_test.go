package relay

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/transport/webhook"
)

// TestTooLargeForNowWaitsOutItsRetryAfter: a webhook receiver answers one
// message 413 with Retry-After: 120 (its body is over the quota for now)
// and takes the others. That message is charged an attempt and tried
// again after the two minutes, when it is taken; the destination was
// never paused, and the others went on. It used to be dead-lettered at
// once, as a 413 without a Retry-After is.
func TestTooLargeForNowWaitsOutItsRetryAfter(t *testing.T) {
	e := newEnv(t, withOrdering(outbox.OrderingNone))
	big, small := msg("hooks", "a", 1), msg("hooks", "b", 2)
	e.enqueue(big, small)
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("webhook-id")
		mu.Lock()
		seen[id]++
		n := seen[id]
		mu.Unlock()
		if id == big.ID.String() && n == 1 {
			w.Header().Set("Retry-After", "120")
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	tr, err := webhook.New(webhook.Config{URL: srv.URL + "/hooks"})
	if err != nil {
		t.Fatal(err)
	}
	rn := e.start(e.config(map[string]Destination{"hooks": {Transport: tr}}))
	rn.settle()
	if e.get(small.ID) != nil {
		t.Fatal("the other message waits beside the one too large for now")
	}
	got := e.get(big.ID)
	if got == nil || len(e.deadLetters()) != 0 {
		t.Fatalf("the message too large for now: %+v, dead letters %d; want it waiting", got, len(e.deadLetters()))
	}
	if got.Attempts != 1 {
		t.Fatalf("attempts %d, want the one charged", got.Attempts)
	}
	if st := rn.r.Stats().Destinations["hooks"]; !st.PausedUntil.IsZero() || st.BreakerTrips != 0 {
		t.Fatalf("the destination paused until %v, %d breaker trips; want neither", st.PausedUntil, st.BreakerTrips)
	}
	rn.advance(119 * time.Second)
	mu.Lock()
	early := seen[big.ID.String()]
	mu.Unlock()
	if early != 1 {
		t.Fatalf("%d requests for it within its Retry-After, want 1", early)
	}
	rn.advance(2 * time.Second)
	if e.get(big.ID) != nil || len(e.deadLetters()) != 0 {
		t.Fatalf("not delivered after its Retry-After (dead letters %d)", len(e.deadLetters()))
	}
}
