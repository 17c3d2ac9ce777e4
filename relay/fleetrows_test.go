package relay

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop/circuitbreaker"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
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

// failingOpen is the store whose OpenCircuit fails while failing is set,
// as when the database is out of reach for a moment.
type failingOpen struct {
	*sqlite.Store
	failing atomic.Bool
}

func (f *failingOpen) OpenCircuit(ctx context.Context, destination, instance string, firstProbe time.Duration) (bool, error) {
	if f.failing.Load() {
		return false, store.ErrUnavailable
	}
	return f.Store.OpenCircuit(ctx, destination, instance, firstProbe)
}

// TestFailedCircuitWriteIsNotUndoneByTheNextReading: the relay's breaker
// opens "down" while the store refuses the write of the shared circuit.
// The write was dropped; the next reading of the circuits found the
// destination closed and closed the relay's own circuit "by another
// instance", and the relay went back to sending to a destination it had
// found down. The write is now made again, and the circuit stays open.
func TestFailedCircuitWriteIsNotUndoneByTheNextReading(t *testing.T) {
	e := newEnv(t)
	st := &failingOpen{Store: e.s}
	st.failing.Store(true)
	for i := range 5 {
		e.enqueue(msg("down", fmt.Sprintf("s%d", i), i))
	}
	var calls atomic.Int64
	rec := &recorder{fn: func(context.Context, *outbox.Message, int) error {
		calls.Add(1)
		return errorhandling.WithHTTPStatus(errors.New("503 service unavailable"), 503)
	}}
	cfg := e.config(map[string]Destination{"down": {
		Transport: rec.transport(), Breaker: &circuitbreaker.Config{MaxFailures: 3}, FirstProbe: time.Hour, MaxProbeInterval: time.Hour,
	}})
	cfg.Workers, cfg.BatchSize = 1, 5
	r, err := New(st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	rn := e.run(r)
	rn.settle()
	if st := rn.r.Stats().Destinations["down"].Breaker; st != circuitbreaker.StateOpen || calls.Load() != 3 {
		t.Fatalf("breaker %v after %d calls, want open after 3", st, calls.Load())
	}
	st.failing.Store(false)
	rn.advance(time.Second)
	rn.advance(time.Second)
	if st := rn.r.Stats().Destinations["down"].Breaker; st != circuitbreaker.StateOpen {
		t.Errorf("the relay's circuit is %v once the store is back; want it open", st)
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("%d calls to the destination found down, want 3", n)
	}
	if c, err := e.s.Circuits(e.ctx); err != nil || len(c) != 1 || !c[0].Open {
		t.Errorf("the fleet's circuits %+v, %v; want down's open", c, err)
	}
}

// openDuringReading is the store whose reading of the shared circuits
// lets during run first, once: a worker opens a circuit while the claimer
// reads them.
type openDuringReading struct {
	*sqlite.Store
	during func()
}

func (o *openDuringReading) Circuits(ctx context.Context) ([]store.Circuit, error) {
	cs, err := o.Store.Circuits(ctx)
	if f := o.during; f != nil {
		o.during = nil
		f()
	}
	return cs, err
}

// TestCircuitOpenedDuringTheReadingStaysOpen: a worker's breaker opens
// "down" while the claimer reads the shared circuits, which were read
// before the worker queued its write. Matched to that reading, the
// circuit was closed "by another instance" and its breaker reset; the
// next reading, which held the write, opened it again with the breaker
// left closed, and the relay's breaker never opened again. The circuit now
// stays open through both readings, with its breaker.
func TestCircuitOpenedDuringTheReadingStaysOpen(t *testing.T) {
	e := newEnv(t)
	st := &openDuringReading{Store: e.s}
	cfg := e.config(map[string]Destination{"down": {Transport: (&recorder{}).transport(),
		Breaker: &circuitbreaker.Config{MaxFailures: 1}}})
	r, err := New(st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := r.dests["down"]
	st.during = func() {
		// as a worker does when its delivery opens the breaker
		permit, err := d.breaker.Allow()
		if err != nil {
			t.Error(err)
			return
		}
		permitDone(permit, errorhandling.WithHTTPStatus(errors.New("503 service unavailable"), 503))
		if d.breaker.State() != circuitbreaker.StateOpen || !d.trip(e.clk.Now()) {
			t.Error("the breaker did not open the circuit")
		}
		r.fleetOpened(d)
	}
	l := newLoop(r)
	for i := range 2 {
		l.syncFleet(e.ctx, e.clk.Now(), true)
		if !d.isOpen() || d.breaker.State() != circuitbreaker.StateOpen {
			t.Fatalf("after reading %d: circuit open %v, breaker %v; want both open", i+1, d.isOpen(), d.breaker.State())
		}
	}
	if c, err := e.s.Circuits(e.ctx); err != nil || len(c) != 1 || !c[0].Open {
		t.Errorf("the fleet's circuits %+v, %v; want down's open", c, err)
	}
	if n := len(e.logs.find("destination's circuit closed by another instance")) +
		len(e.logs.find("destination's circuit opened by another instance")); n != 0 {
		t.Errorf("%d log lines say another instance changed the circuit; none did", n)
	}
}
