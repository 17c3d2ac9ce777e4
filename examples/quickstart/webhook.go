package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/backstophq/backstop/transport/webhook"
)

// flakyWebhook is the destination: it verifies each request's signature,
// fails chosen deliveries on purpose, and records the order in which each
// stream's steps arrive.
type flakyWebhook struct {
	srv *httptest.Server

	mu                           sync.Mutex
	failLeft                     map[key]int
	rejects                      map[key]bool
	got                          map[string][]int // stream -> steps accepted, in arrival order
	nRequests, n503, n400, nSeen int
}

type key struct {
	stream string
	step   int
}

func newFlakyWebhook(secret []byte) *flakyWebhook {
	h := &flakyWebhook{failLeft: map[key]int{}, rejects: map[key]bool{}, got: map[string][]int{}}
	h.srv = httptest.NewServer(webhook.RequireSignature(secret, 5*time.Minute, http.HandlerFunc(h.serve)))
	return h
}

func (h *flakyWebhook) URL() string { return h.srv.URL + "/hooks/fulfilment" }
func (h *flakyWebhook) Close()      { h.srv.Close() }

func (h *flakyWebhook) failFirst(stream string, step, n int) { h.failLeft[key{stream, step}] = n }
func (h *flakyWebhook) reject(stream string, step int)       { h.rejects[key{stream, step}] = true }

func (h *flakyWebhook) serve(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Order string `json:"order"`
		Step  int    `json:"step"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	k := key{r.Header.Get("Backstop-Stream"), body.Step}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.nRequests++
	switch {
	case h.rejects[k]:
		h.n400++
		http.Error(w, "unknown fulfilment step", http.StatusBadRequest)
	case h.failLeft[k] > 0:
		h.failLeft[k]--
		h.n503++
		http.Error(w, "warehouse busy, try again", http.StatusServiceUnavailable)
	default:
		h.got[k.stream] = append(h.got[k.stream], k.step)
		h.nSeen++
		w.WriteHeader(http.StatusNoContent)
	}
}

func (h *flakyWebhook) requests() int    { h.mu.Lock(); defer h.mu.Unlock(); return h.nRequests }
func (h *flakyWebhook) unavailable() int { h.mu.Lock(); defer h.mu.Unlock(); return h.n503 }
func (h *flakyWebhook) rejected() int    { h.mu.Lock(); defer h.mu.Unlock(); return h.n400 }

// check returns how many deliveries were accepted and how many streams saw
// a step before an earlier one (or a step twice).
func (h *flakyWebhook) check() (accepted, violations int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, steps := range h.got {
		for i := 1; i < len(steps); i++ {
			if steps[i] <= steps[i-1] {
				violations++
				break
			}
		}
	}
	return h.nSeen, violations
}
