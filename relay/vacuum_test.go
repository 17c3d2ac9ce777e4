package relay

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/backstophq/backstop/store/sqlite"
)

// vacuuming is a store.Vacuumer whose Vacuum waits until the test lets
// it return.
type vacuuming struct {
	*sqlite.Store
	calls   atomic.Int32
	entered chan struct{}
	release chan struct{}
}

func (v *vacuuming) Vacuum(ctx context.Context) ([]string, error) {
	v.calls.Add(1)
	v.entered <- struct{}{}
	select {
	case <-v.release:
		return []string{"outbox", "streams"}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// TestLeaderVacuumsOffItsBeat: the leader has a store.Vacuumer store
// vacuum every vacuumEvery, on a goroutine of its own, so that its
// heart-beats go on while a VACUUM runs (seconds on a deep backlog), and
// starts no second one before the first has ended. Stats counts the
// tables vacuumed.
func TestLeaderVacuumsOffItsBeat(t *testing.T) {
	e := newEnv(t)
	v := &vacuuming{Store: e.s, entered: make(chan struct{}, 4), release: make(chan struct{})}
	r, err := New(v, e.config(map[string]Destination{"d": {Transport: (&recorder{}).transport()}}))
	if err != nil {
		t.Fatal(err)
	}
	if r.heartbeatEvery() <= vacuumEvery {
		t.Fatalf("heartbeatEvery %v, vacuumEvery %v: the test wants beats further apart", r.heartbeatEvery(), vacuumEvery)
	}
	rn := e.run(r)
	wait := func(what string) {
		t.Helper()
		select {
		case <-v.entered:
		case <-e.waitDone():
			t.Fatalf("the leader never vacuumed %s", what)
		}
	}
	if err := r.maint.vacuumParked.wait(e.ctx, 0); err != nil { // its timer is set
		t.Fatal(err)
	}
	e.clk.Advance(vacuumEvery)
	wait("after vacuumEvery")
	// Two beats while the vacuum runs: each turn ends, none starts another.
	turn(e, r.heartbeatEvery(), rn)
	turn(e, r.heartbeatEvery(), rn)
	if got := v.calls.Load(); got != 1 {
		t.Fatalf("%d vacuums started while the first ran, want 1", got)
	}
	v.release <- struct{}{}
	if err := r.maint.vacuumParked.wait(e.ctx, 1); err != nil { // its next timer is set
		t.Fatal(err)
	}
	e.clk.Advance(vacuumEvery)
	wait("again once the first had ended")
	if got := r.Stats().Vacuums; got != 2 {
		t.Errorf("Stats().Vacuums = %d, want 2 (the tables of the first vacuum)", got)
	}
	if err := rn.stop(); err != nil { // the second vacuum ends with the relay
		t.Logf("Run: %v", err)
	}
}

// TestNoVacuumTurnsTheLeadersVacuumOff.
func TestNoVacuumTurnsTheLeadersVacuumOff(t *testing.T) {
	e := newEnv(t)
	v := &vacuuming{Store: e.s, entered: make(chan struct{}, 4), release: make(chan struct{})}
	cfg := e.config(map[string]Destination{"d": {Transport: (&recorder{}).transport()}})
	cfg.NoVacuum = true
	r, err := New(v, cfg)
	if err != nil {
		t.Fatal(err)
	}
	rn := e.run(r)
	turn(e, r.heartbeatEvery(), rn)
	turn(e, r.heartbeatEvery(), rn)
	if !r.Stats().Leader {
		t.Fatal("the relay does not lead its fleet")
	}
	if got := v.calls.Load(); got != 0 || signalRound(&r.maint.vacuumParked) != 0 {
		t.Errorf("%d vacuums with NoVacuum, and the vacuum's turns at %d; want none", got, signalRound(&r.maint.vacuumParked))
	}
}

// failingVacuum fails its first fails calls.
type failingVacuum struct {
	*sqlite.Store
	fails int32
	calls atomic.Int32
	done  chan struct{} // receives after each call
}

func (v *failingVacuum) Vacuum(context.Context) ([]string, error) {
	defer func() { v.done <- struct{}{} }()
	if v.calls.Add(1) <= v.fails {
		return nil, errors.New("database down")
	}
	return nil, nil
}

// TestVacuumFailuresAreSaidOnce: a store that cannot vacuum (the database
// down) is warned about once, not every vacuumEvery, and its recovery
// once.
func TestVacuumFailuresAreSaidOnce(t *testing.T) {
	e := newEnv(t)
	v := &failingVacuum{Store: e.s, fails: 3, done: make(chan struct{}, 8)}
	r, err := New(v, e.config(map[string]Destination{"d": {Transport: (&recorder{}).transport()}}))
	if err != nil {
		t.Fatal(err)
	}
	e.run(r)
	for i := range uint64(4) {
		if err := r.maint.vacuumParked.wait(e.ctx, i); err != nil { // its timer is set
			t.Fatal(err)
		}
		e.clk.Advance(vacuumEvery)
		select {
		case <-v.done:
		case <-e.waitDone():
			t.Fatalf("vacuum call %d never came", i+1)
		}
	}
	if err := r.maint.vacuumParked.wait(e.ctx, 4); err != nil { // the fourth call's outcome is logged
		t.Fatal(err)
	}
	var warned int
	for _, rec := range e.logs.find("vacuuming the store's tables failed") {
		if rec.level == slog.LevelWarn {
			warned++
		}
	}
	if warned != 1 || len(e.logs.find("vacuuming the store's tables works again")) != 1 {
		t.Errorf("three failures then a success: %d warnings and %d recoveries logged, want 1 and 1",
			warned, len(e.logs.find("vacuuming the store's tables works again")))
	}
}

// TestRelayAloneVacuums: a relay without a fleet (NoFleet) never leads,
// and nothing else vacuums for it: it vacuums as a leader does.
func TestRelayAloneVacuums(t *testing.T) {
	e := newEnv(t)
	v := &vacuuming{Store: e.s, entered: make(chan struct{}, 4), release: make(chan struct{}, 1)}
	cfg := e.config(map[string]Destination{"d": {Transport: (&recorder{}).transport()}})
	cfg.NoFleet = true
	r, err := New(v, cfg)
	if err != nil {
		t.Fatal(err)
	}
	rn := e.run(r)
	if err := r.maint.vacuumParked.wait(e.ctx, 0); err != nil { // its timer is set
		t.Fatal(err)
	}
	e.clk.Advance(vacuumEvery)
	select {
	case <-v.entered:
	case <-e.waitDone():
		t.Fatal("the relay alone never vacuumed")
	}
	v.release <- struct{}{}
	if err := r.maint.vacuumParked.wait(e.ctx, 1); err != nil { // its next timer is set
		t.Fatal(err)
	}
	if got := r.Stats().Vacuums; got != 2 {
		t.Errorf("Stats().Vacuums = %d, want 2 (the tables of its vacuum)", got)
	}
	if err := rn.stop(); err != nil {
		t.Logf("Run: %v", err)
	}
}
