package relay

import (
	"testing"
	"time"

	"github.com/backstophq/backstop/circuitbreaker"
	"github.com/backstophq/backstop/store"
)

// TestBadCircuitRowDoesNotCutTheRelayOffTheFleet: the circuits table holds
// a row written by hand for another destination, its opened_at text
// ('yesterday'). While this relay runs, another instance opens the
// circuit of "hooks"; within a poll interval this relay's circuit of
// hooks is open too, and when the other closes it, closed. Reading the
// circuits failed on the bad row, so the relay never followed the fleet.
func TestBadCircuitRowDoesNotCutTheRelayOffTheFleet(t *testing.T) {
	e := newEnv(t)
	if _, err := e.s.DB().ExecContext(e.ctx,
		`INSERT INTO backstop_circuits (destination, open, opened_at) VALUES ('elsewhere', 1, 'yesterday')`); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	cfg := e.config(map[string]Destination{"hooks": {Transport: rec.transport()}})
	cfg.Instance = store.Instance{ID: "relay-b"}
	rn := e.start(cfg)
	rn.settle()
	if _, err := e.s.OpenCircuit(e.ctx, "hooks", "relay-a", time.Minute); err != nil {
		t.Fatal(err)
	}
	rn.advance(time.Second)
	if st := rn.r.Stats().Destinations["hooks"].Breaker; st == circuitbreaker.StateClosed {
		t.Fatal("the fleet opened hooks' circuit; this relay's is still closed")
	}
	if err := e.s.CloseCircuit(e.ctx, "hooks", "relay-a"); err != nil {
		t.Fatal(err)
	}
	rn.advance(time.Second)
	if st := rn.r.Stats().Destinations["hooks"].Breaker; st != circuitbreaker.StateClosed {
		t.Fatalf("the fleet closed hooks' circuit; this relay's is %v", st)
	}
	if len(e.logs.find("destination's circuit opened by another instance")) != 1 {
		t.Error("the adoption of the fleet's circuit was not logged once")
	}
}
