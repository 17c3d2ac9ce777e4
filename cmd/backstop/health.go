package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/store"
)

// How long the relay's claim loop may go without finishing a round. A
// round's store calls are each bounded at 30 s, and its wait by the
// relay's MaxPollInterval (added to both): past relayReadyWithin the
// relay is not delivering and the process is not ready; past
// relayAliveWithin, far longer than a round can take, even against a
// store that is down (its calls fail and the rounds go on), the loop is
// wedged and only a restart helps.
const (
	relayReadyWithin = 2 * time.Minute
	relayAliveWithin = 10 * time.Minute
	// checkTimeout bounds each readiness check.
	checkTimeout = 2 * time.Second
)

// check is one thing readiness depends on: fn returns nil when it is
// fine, else why not.
type check struct {
	name string
	fn   func(ctx context.Context) error
	// plain says its errors name no host, user or database, so that a
	// request without a token may read them (see health.detailed).
	plain bool
}

// health answers /healthz (liveness) and /readyz (readiness).
type health struct {
	checks []check
	// lastRound is the relay's Relay.LastRound; maxPoll its
	// MaxPollInterval.
	lastRound func() time.Time
	maxPoll   time.Duration
	now       func() time.Time
	// detailed says whether a request may read why a check failed: a
	// driver's error names hosts, users and databases, and /readyz needs
	// no token. Nil lets every request read it (serve without tokens
	// listens on loopback only).
	detailed func(*http.Request) bool
}

// withheld replaces a failed check's error for a request that may not
// read it.
const withheld = "failed; send an admin token (Authorization: Bearer) to read why"

// storeCheck asks the store a read whose cost does not grow with
// anything: one message by primary key (the nil ID, which none has). It
// counted the dead letters, a read that grows with the queue: a million
// of them could take past the limit and make a healthy server not ready.
func storeCheck(st store.Store) check {
	return check{name: "store", fn: func(ctx context.Context) error {
		if _, err := st.Get(ctx, uuid.Nil); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		return nil
	}}
}

// relayStalled says why the relay's loop has gone past within without
// finishing a round, or "" when it has not.
func (h *health) relayStalled(within time.Duration) string {
	last := h.lastRound()
	if last.IsZero() {
		return "" // not started yet: serve starts it with the listener
	}
	limit := within + h.maxPoll
	if idle := h.now().Sub(last); idle > limit {
		return fmt.Sprintf("the relay's claim loop has not finished a round for %s (its last at %s; a round takes at most about %s, its store calls are bounded at 30 s)",
			idle.Round(time.Second), last.UTC().Format(time.RFC3339), limit)
	}
	return ""
}

// checkResult is one check in /readyz's answer.
type checkResult struct {
	Name     string `json:"name"`
	OK       bool   `json:"ok"`
	Error    string `json:"error,omitempty"`
	Excluded bool   `json:"excluded,omitempty"`
}

// readyz answers 200 when every check passes, else 503, with a JSON body
// that lists each check and why one failed. ?exclude=NAME (repeatable;
// "sources" for every source) leaves a check out of the verdict: it is
// still run and shown.
func (h *health) readyz(w http.ResponseWriter, r *http.Request) {
	excluded := map[string]bool{}
	for _, v := range r.URL.Query()["exclude"] {
		for _, name := range strings.Split(v, ",") {
			excluded[strings.TrimSpace(name)] = true
		}
	}
	checks := append([]check{{name: "relay", plain: true, fn: func(context.Context) error {
		if why := h.relayStalled(relayReadyWithin); why != "" {
			return errors.New(why)
		}
		return nil
	}}}, h.checks...)
	type answer struct {
		i   int
		err error
	}
	answers := make(chan answer, len(checks)) // a late check never blocks
	ctx, cancel := context.WithTimeout(r.Context(), checkTimeout)
	defer cancel()
	results := make([]checkResult, len(checks))
	for i, c := range checks {
		results[i] = checkResult{Name: c.name, Error: fmt.Sprintf("did not answer within %s", checkTimeout),
			Excluded: excluded[c.name] || excluded["sources"] && strings.HasPrefix(c.name, "source:")}
		go func() { answers <- answer{i, c.fn(ctx)} }()
	}
wait:
	for range checks {
		select {
		case a := <-answers:
			switch {
			case a.err == nil:
				results[a.i].OK, results[a.i].Error = true, ""
			case !errors.Is(a.err, context.DeadlineExceeded):
				results[a.i].Error = a.err.Error()
				if !checks[a.i].plain && h.detailed != nil && !h.detailed(r) {
					results[a.i].Error = withheld
				}
			}
		case <-ctx.Done():
			break wait
		}
	}
	ready := true
	for _, c := range results {
		if !c.OK && !c.Excluded {
			ready = false
		}
	}
	status, code := "ready", http.StatusOK
	if !ready {
		status, code = "not ready", http.StatusServiceUnavailable
	}
	writeHealth(w, code, map[string]any{"status": status, "checks": results})
}

// healthz answers 200 unless the process is wedged: the relay's loop has
// not finished a round for far longer than one can take. A dependency
// that is down (the store, a broker) does not fail it: an orchestrator
// restarts a process whose liveness fails, which cures none of them.
func (h *health) healthz(w http.ResponseWriter, _ *http.Request) {
	if why := h.relayStalled(relayAliveWithin); why != "" {
		writeHealth(w, http.StatusServiceUnavailable, map[string]any{"status": "wedged", "error": why})
		return
	}
	writeHealth(w, http.StatusOK, map[string]any{"status": "ok"})
}

func writeHealth(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
