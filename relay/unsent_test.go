package relay

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop/circuitbreaker"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/transport/webhook"
)

// A probe of an open circuit whose message the transport refuses before
// sending anything (a header HTTP manages itself) learnt nothing about the
// destination: the circuit stays open, and the message is dead-lettered.
// It counted as a success and closed the circuit, and the destination,
// still down, took requests until it tripped again.
func TestUnsentProbeDoesNotCloseTheCircuit(t *testing.T) {
	e := newEnv(t)
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	tr, err := webhook.New(webhook.Config{URL: srv.URL + "/hooks"})
	if err != nil {
		t.Fatal(err)
	}
	// The unsendable message is due just before the first probe.
	bad := msg("billing", "", 99)
	bad.Headers = map[string]string{"Host": "other.example"}
	bad.ScheduledFor = epoch.Add(500 * time.Millisecond)
	e.enqueue(bad)
	var msgs []*outbox.Message
	for i := range 5 {
		msgs = append(msgs, msg("billing", "", i))
	}
	e.enqueue(msgs...)
	cfg := e.config(map[string]Destination{"billing": {Transport: tr, Breaker: &circuitbreaker.Config{MaxFailures: 3}}})
	cfg.Workers, cfg.BatchSize = 1, 10
	rn := e.start(cfg)
	rn.settle()
	if st := rn.r.Breaker("billing").State(); st != circuitbreaker.StateOpen {
		t.Fatalf("breaker %v, want open", st)
	}
	rn.advance(time.Second) // the first probe takes the unsendable message
	if recs := e.logs.find("destination recovered"); len(recs) > 0 {
		t.Fatalf("the circuit was closed (%q) by a probe that sent nothing", recs[0].msg)
	}
	if st := rn.r.Breaker("billing").State(); st != circuitbreaker.StateOpen {
		t.Fatalf("breaker %v after the unsent probe, want open", st)
	}
	if got := e.get(bad.ID); got != nil && got.DeadLetteredAt.IsZero() {
		t.Fatalf("the unsendable message was not dead-lettered: %+v", got)
	}
}
