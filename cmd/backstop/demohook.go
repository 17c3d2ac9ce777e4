package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"

	"github.com/backstophq/backstop/circuitbreaker"
	"github.com/backstophq/backstop/transport/webhook"
)

// demoHook is the demo's destination: one local HTTP server with a path per
// destination. It verifies every signature, fails on purpose in the ways
// real endpoints do, and checks that each stream's steps arrive in order.
type demoHook struct {
	srv   *httptest.Server
	start time.Time
	plan  demoPlan

	mu       sync.Mutex
	next     map[streamKey]int // the step each stream expects next
	answered map[int]int       // status -> count
	tries    map[msgKey]int    // requests per message
	accepted int
	// seen holds the webhook-id of every message accepted: a receiver
	// de-duplicates on it, since delivery is at least once (a request that
	// outlived the relay's timeout was accepted here and is sent again).
	seen       map[string]bool
	duplicates int
	// opened is set once the outage destination's breaker has opened.
	opened bool
	// throttleAccepted counts the throttled destination's acceptances
	// until its window opens; throttleEnd is when the window closes.
	throttleAccepted int
	throttleEnd      time.Time
	// violations counts steps that arrived out of order: a step before an
	// earlier one, a step twice, or a step with an earlier one missing.
	violations int
}

type streamKey struct{ dest, stream string }

type msgKey struct {
	streamKey
	step int
}

// demoPlan says how the endpoints misbehave.
type demoPlan struct {
	// outageDest answers 503 to everything from outageFrom after start
	// until outageTo, and past it until its breaker has opened: the outage
	// is there to open the breaker, and on a busy machine, where few
	// requests reach the endpoint in that time, it did not.
	outageDest           string
	outageFrom, outageTo time.Duration
	// throttleAfter is how many messages throttleDest accepts before its
	// rate-limit window opens; 0: never.
	throttleAfter int
	// bad are the messages the endpoint refuses with 422 (the message's
	// fault): they are dead-lettered at once.
	bad map[msgKey]bool
}

// blips is how many 503s a message gets before it is accepted: most none,
// some one (an in-process retry fixes it), a few three (released for later,
// no attempt charged).
func blips(k msgKey) int {
	switch h := hashKey(k) % 100; {
	case h < 4:
		return 1
	case h < 6:
		return 3
	}
	return 0
}

// The throttled destination's rate limit: once it has accepted
// demoPlan.throttleAfter messages, it answers every request 429 with
// Retry-After: 1 for throttleFor, as a rate limiter's window does. (Each
// message used to get its own 429 by chance, one in a hundred: each paused
// the whole destination for a second, as a Retry-After does, and the demo
// took 25 s.)
const (
	throttleDest = "orders"
	throttleFor  = time.Second
)

func hashKey(k msgKey) uint32 {
	h := uint32(2166136261)
	for _, s := range []string{k.dest, k.stream, strconv.Itoa(k.step)} {
		for i := 0; i < len(s); i++ {
			h = (h ^ uint32(s[i])) * 16777619
		}
		h = (h ^ '/') * 16777619
	}
	return h
}

func newDemoHook(secret []byte, plan demoPlan) *demoHook {
	h := &demoHook{plan: plan, start: time.Now(), next: map[streamKey]int{},
		answered: map[int]int{}, tries: map[msgKey]int{}, seen: map[string]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /hooks/{dest}", h.serve)
	h.srv = httptest.NewServer(webhook.RequireSignature(secret, 5*time.Minute, mux))
	return h
}

func (h *demoHook) url(dest string) string { return h.srv.URL + "/hooks/" + dest }
func (h *demoHook) close()                 { h.srv.Close() }

// demoPayload is the body of a demo message.
type demoPayload struct {
	Step   int    `json:"step"`
	Amount int    `json:"amount"`
	Note   string `json:"note,omitempty"`
}

func (h *demoHook) serve(w http.ResponseWriter, r *http.Request) {
	var body demoPayload
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		h.answer(w, http.StatusBadRequest, "body is not JSON")
		return
	}
	k := msgKey{streamKey{r.PathValue("dest"), r.Header.Get("Backstop-Stream")}, body.Step}
	since := time.Since(h.start)
	h.mu.Lock()
	defer h.mu.Unlock()
	id := r.Header.Get("webhook-id")
	if h.seen[id] {
		h.duplicates++ // accepted before: answered as done, counted once
		h.answered[http.StatusNoContent]++
		w.WriteHeader(http.StatusNoContent)
		return
	}
	h.tries[k]++
	n := h.tries[k]
	switch {
	case k.dest == h.plan.outageDest && since >= h.plan.outageFrom && (since < h.plan.outageTo || !h.opened):
		h.answerLocked(w, http.StatusServiceUnavailable, "upstream database unavailable")
	case h.plan.bad[k]:
		h.answerLocked(w, http.StatusUnprocessableEntity, "amount must not be negative")
	case n <= blips(k):
		h.answerLocked(w, http.StatusServiceUnavailable, "busy, try again")
	case k.dest == throttleDest && h.throttled():
		w.Header().Set("Retry-After", "1")
		h.answerLocked(w, http.StatusTooManyRequests, "rate limited")
	default:
		sk := k.streamKey
		if h.next[sk] == 0 {
			h.next[sk] = 1
		}
		if body.Step != h.next[sk] {
			h.violations++
		}
		if body.Step >= h.next[sk] {
			h.next[sk] = body.Step + 1
		}
		h.accepted++
		if k.dest == throttleDest && h.throttleEnd.IsZero() {
			h.throttleAccepted++
		}
		h.seen[id] = true
		h.answered[http.StatusNoContent]++
		w.WriteHeader(http.StatusNoContent)
	}
}

// throttled says whether the throttled destination's rate-limit window is
// open, opening it when its acceptances reach plan.throttleAfter; h.mu is
// held.
func (h *demoHook) throttled() bool {
	if h.throttleEnd.IsZero() && h.plan.throttleAfter > 0 && h.throttleAccepted >= h.plan.throttleAfter {
		h.throttleEnd = time.Now().Add(throttleFor)
	}
	return !h.throttleEnd.IsZero() && time.Now().Before(h.throttleEnd)
}

func (h *demoHook) answer(w http.ResponseWriter, status int, text string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.answerLocked(w, status, text)
}

func (h *demoHook) answerLocked(w http.ResponseWriter, status int, text string) {
	h.answered[status]++
	http.Error(w, text, status)
}

// breakerChanged is the outage destination's Breaker.OnStateChange: it
// notes that the breaker opened, which may end the outage.
func (h *demoHook) breakerChanged(_, to circuitbreaker.State) {
	if to != circuitbreaker.StateOpen {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.opened = true
}

// hookCounts is a snapshot of what the endpoint saw.
type hookCounts struct {
	accepted, violations, duplicates int
	answered                         map[int]int
}

func (h *demoHook) counts() hookCounts {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := hookCounts{accepted: h.accepted, violations: h.violations, duplicates: h.duplicates, answered: map[int]int{}}
	for s, n := range h.answered {
		c.answered[s] = n
	}
	return c
}
