package relay

import (
	"context"
	"maps"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
)

// storeGaugeNames are the store-wide gauges, exported by one relay of a
// fleet.
var storeGaugeNames = []string{
	"backstop_dlq_depth", "backstop_dlq_oldest_age_seconds", "backstop_scheduled_backlog",
	"backstop_poison_candidates", "backstop_blocked_streams", "backstop_leased_messages",
}

// countingStore is a SQLite store that counts the Gauges calls made
// through it: one per relay tells which relay read the store gauges.
type countingStore struct {
	*sqlite.Store
	calls atomic.Int64
}

func (s *countingStore) Gauges(ctx context.Context, minAttempts int) (store.Gauges, error) {
	s.calls.Add(1)
	return s.Store.Gauges(ctx, minAttempts)
}

// gaugeFixture leaves in e's store, for a destination no test relay
// delivers (so they never touch it): a dead letter, a strict stream
// blocked by a failed head waiting 10 h for its retry, and a message
// enqueued for 10 h later.
func gaugeFixture(e *env) {
	e.t.Helper()
	ms := []*outbox.Message{msg("elsewhere", "s", 1), msg("elsewhere", "s", 2), msg("elsewhere", "t", 1), msg("elsewhere", "", 1)}
	ms[3].ScheduledFor = epoch.Add(10 * time.Hour)
	e.enqueue(ms...)
	setup := store.Instance{ID: "setup"}
	res, err := e.s.ProcessBatch(e.ctx, &store.Batch{Instance: setup,
		Claim: store.ClaimRequest{Limit: 10, Destinations: []string{"elsewhere"}}})
	if err != nil {
		e.t.Fatal(err)
	}
	if len(res.Claimed) != 3 {
		e.t.Fatalf("the fixture claimed %d messages, want s/1, s/2 and t/1", len(res.Claimed))
	}
	if _, err := e.s.ProcessBatch(e.ctx, &store.Batch{Instance: setup, Failures: []store.Failure{
		{ID: ms[0].ID, Error: "connection refused", RetryAfter: 10 * time.Hour},
		{ID: ms[2].ID, Error: "bad payload", Permanent: true},
	}, Releases: []store.Release{{ID: ms[1].ID}}}); err != nil {
		e.t.Fatal(err)
	}
}

// storeSays returns the store gauges as the relay should export them at
// the fake clock's now, asked through the store's own queries.
func storeSays(e *env) map[string]float64 {
	e.t.Helper()
	g, err := e.s.Gauges(e.ctx, 1) // half of MaxAttempts 3, at least 1
	if err != nil {
		e.t.Fatal(err)
	}
	depth, err := e.s.DLQ().Count(e.ctx)
	if err != nil || depth != g.DLQPending {
		e.t.Fatalf("DLQ().Count = %d, %v; Gauges says %d", depth, err, g.DLQPending)
	}
	age := 0.0
	if !g.OldestDLQ.IsZero() {
		age = e.clk.Now().Sub(g.OldestDLQ).Seconds()
	}
	return map[string]float64{
		"backstop_dlq_depth": float64(g.DLQPending), "backstop_dlq_oldest_age_seconds": age,
		"backstop_scheduled_backlog": float64(g.Scheduled), "backstop_poison_candidates": float64(g.PoisonCandidates),
		"backstop_blocked_streams": float64(g.BlockedStreams), "backstop_leased_messages": float64(g.Leased),
	}
}

// exportsStoreGauges requires reg to export the store gauges with the
// values want, or (want nil) none of them.
func exportsStoreGauges(t *testing.T, who string, reg *prometheus.Registry, want map[string]float64) {
	t.Helper()
	got := gather(t, reg)
	for _, name := range storeGaugeNames {
		v, ok := got[name]
		switch {
		case want == nil && ok:
			t.Errorf("%s exports %s = %v, want it left out", who, name, v)
		case want != nil && (!ok || v != want[name]):
			t.Errorf("%s: %s = %v (present %v), want %v", who, name, v, ok, want[name])
		}
	}
}

// signalRound returns the last round published on s.
func signalRound(s *signal) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.round
}

// turn moves the fake clock by d, once each maintainer of rns waits for
// its timer, and waits until each has taken its turn (beat, gauges) and
// waits again.
func turn(e *env, d time.Duration, rns ...*running) {
	e.t.Helper()
	parked := make([]uint64, len(rns))
	for i, rn := range rns {
		if err := rn.r.maint.parked.wait(e.ctx, 0); err != nil {
			e.t.Fatalf("the maintainer never waited for its timer: %v", err)
		}
		parked[i] = signalRound(&rn.r.maint.parked)
	}
	e.clk.Advance(d)
	for i, rn := range rns {
		if err := rn.r.maint.parked.wait(e.ctx, parked[i]); err != nil {
			e.t.Fatalf("the maintainer did not take its turn: %v", err)
		}
	}
}

// readGauges makes rn's maintainer take its next turn, in which it reads
// the store gauges if it leads its fleet or has none.
func (rn *running) readGauges() {
	rn.e.t.Helper()
	turn(rn.e, max(rn.r.heartbeatEvery(), monitorEvery), rn)
}

// TestGaugesOnlyTheLeaderExportsStoreGauges: of two relays on one store,
// the leader alone reads the store gauges, on its beat, and exports them;
// scrapes never query the store; when the leader stops, the other takes
// over and exports them.
func TestGaugesOnlyTheLeaderExportsStoreGauges(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	gaugeFixture(e)
	start := func(id string) (*running, *countingStore, *prometheus.Registry) {
		cs := &countingStore{Store: e.s}
		reg := prometheus.NewRegistry()
		cfg := e.config(map[string]Destination{"orders": {Transport: (&recorder{}).transport()}})
		cfg.Instance = store.Instance{ID: id}
		cfg.Metrics = reg
		r, err := New(cs, cfg)
		if err != nil {
			t.Fatal(err)
		}
		rn := e.run(r)
		if err := r.maint.parked.wait(e.ctx, 0); err != nil { // its first turn is over
			t.Fatal(err)
		}
		return rn, cs, reg
	}
	rn1, cs1, reg1 := start("relay-1")
	rn2, cs2, reg2 := start("relay-2")
	if !rn1.r.Stats().Leader || rn2.r.Stats().Leader {
		t.Fatalf("leaders: relay-1 %v, relay-2 %v; want relay-1 alone", rn1.r.Stats().Leader, rn2.r.Stats().Leader)
	}

	want := storeSays(e)
	for name, v := range map[string]float64{"backstop_dlq_depth": 1, "backstop_scheduled_backlog": 2,
		"backstop_poison_candidates": 1, "backstop_blocked_streams": 1, "backstop_leased_messages": 0} {
		if want[name] != v {
			t.Fatalf("the fixture gives %s = %v, want %v", name, want[name], v)
		}
	}
	for range 3 { // scrapes read the last reading, never the store
		exportsStoreGauges(t, "relay-1 (leader)", reg1, want)
		exportsStoreGauges(t, "relay-2", reg2, nil)
	}
	if got := gather(t, reg2)["backstop_leader"]; got != 0 {
		t.Errorf("relay-2's leader gauge = %v, want 0", got)
	}
	if n1, n2 := cs1.calls.Load(), cs2.calls.Load(); n1 != 1 || n2 != 0 {
		t.Fatalf("Gauges calls after three scrapes: relay-1 %d, relay-2 %d; want 1 and 0", n1, n2)
	}

	// The leader reads them again on its next beat: a change in the store
	// shows after it, not before.
	es, err := e.s.DLQ().List(e.ctx, &dlq.Filters{Status: dlq.StatusPending})
	if err != nil || len(es) != 1 {
		t.Fatalf("pending dead letters: %d, %v", len(es), err)
	}
	if err := e.s.DLQ().Resolve(e.ctx, es[0].ID, "dealt with"); err != nil {
		t.Fatal(err)
	}
	exportsStoreGauges(t, "relay-1 before its next beat", reg1, want)
	turn(e, rn1.r.heartbeatEvery(), rn1, rn2)
	want = storeSays(e)
	if want["backstop_dlq_depth"] != 0 {
		t.Fatalf("the store still counts %v dead letters", want["backstop_dlq_depth"])
	}
	exportsStoreGauges(t, "relay-1 after its beat", reg1, want)
	exportsStoreGauges(t, "relay-2", reg2, nil)
	if n1, n2 := cs1.calls.Load(), cs2.calls.Load(); n1 != 2 || n2 != 0 {
		t.Fatalf("Gauges calls after a beat: relay-1 %d, relay-2 %d; want 2 and 0", n1, n2)
	}

	// The leader stops (and resigns): it exports them no more, and the
	// other takes over at its next beat.
	if err := rn1.stop(); err != nil {
		t.Fatal(err)
	}
	exportsStoreGauges(t, "relay-1 stopped", reg1, nil)
	turn(e, rn2.r.heartbeatEvery(), rn2)
	if !rn2.r.Stats().Leader {
		t.Fatal("relay-2 did not take over the leadership")
	}
	exportsStoreGauges(t, "relay-2 (new leader)", reg2, storeSays(e))
	if got := gather(t, reg2)["backstop_leader"]; got != 1 {
		t.Errorf("relay-2's leader gauge = %v, want 1", got)
	}
	if n := cs2.calls.Load(); n != 1 {
		t.Fatalf("relay-2's Gauges calls = %d, want 1", n)
	}
}

// plainStore hides every optional interface of the store it wraps (no
// store.Fleet, no store.Gauger): a custom store.
type plainStore struct{ store.Store }

// runWithoutFleet runs a relay without a fleet on s, exporting to the
// registry it returns, once its maintainer has taken its first reading and
// waits for its timer.
func runWithoutFleet(e *env, s store.Store) (*running, *prometheus.Registry) {
	e.t.Helper()
	reg := prometheus.NewRegistry()
	cfg := e.config(map[string]Destination{"orders": {Transport: (&recorder{}).transport()}})
	cfg.Metrics, cfg.NoFleet = reg, true
	r, err := New(s, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	rn := e.run(r)
	if err := r.maint.parked.wait(e.ctx, 0); err != nil {
		e.t.Fatal(err)
	}
	return rn, reg
}

// TestGaugesWithoutAFleetAreReadOnTheRelaysTimer: a relay without a
// fleet reads the store gauges every monitorEvery on its own, through
// store.Gauger when the store has it and through the monitoring queries
// otherwise; scrapes read the last reading.
func TestGaugesWithoutAFleetAreReadOnTheRelaysTimer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		wrap  func(s *sqlite.Store) store.Store
		calls func(s store.Store) int64 // Gauges calls, -1 when not counted
	}{
		{"Gauger with NoFleet", func(s *sqlite.Store) store.Store { return &countingStore{Store: s} },
			func(s store.Store) int64 { return s.(*countingStore).calls.Load() }},
		{"monitoring queries", func(s *sqlite.Store) store.Store { return plainStore{s} },
			func(store.Store) int64 { return -1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			gaugeFixture(e)
			s := tc.wrap(e.s)
			rn, reg := runWithoutFleet(e, s)
			want := storeSays(e)
			if tc.calls(s) < 0 {
				delete(want, "backstop_leased_messages") // only a store.Gauger counts leases
			}
			check := func(what string, want map[string]float64) {
				t.Helper()
				got := gather(t, reg)
				for _, name := range storeGaugeNames {
					v, ok := got[name]
					w, wanted := want[name]
					if ok != wanted || v != w {
						t.Errorf("%s: %s = %v (present %v), want %v (present %v)", what, name, v, ok, w, wanted)
					}
				}
			}
			check("first reading", want)

			es, err := e.s.DLQ().List(e.ctx, &dlq.Filters{Status: dlq.StatusPending})
			if err != nil || len(es) != 1 {
				t.Fatalf("pending dead letters: %d, %v", len(es), err)
			}
			if err := e.s.DLQ().Resolve(e.ctx, es[0].ID, "dealt with"); err != nil {
				t.Fatal(err)
			}
			check("before the next reading", want)
			if n := tc.calls(s); n >= 0 && n != 1 {
				t.Fatalf("Gauges calls after scrapes = %d, want 1", n)
			}
			rn.readGauges()
			want2 := storeSays(e)
			if _, ok := want["backstop_leased_messages"]; !ok {
				delete(want2, "backstop_leased_messages")
			}
			if want2["backstop_dlq_depth"] != 0 {
				t.Fatalf("the store still counts %v dead letters", want2["backstop_dlq_depth"])
			}
			check("after the next reading", want2)
			if n := tc.calls(s); n >= 0 && n != 2 {
				t.Fatalf("Gauges calls after a reading = %d, want 2", n)
			}
			if err := rn.stop(); err != nil {
				t.Fatal(err)
			}
			check("stopped", nil)
		})
	}
}

// flakyGauger is a SQLite store whose Gauges fails while fail is set, as
// a reading past monitorTimeout does on a slow database.
type flakyGauger struct {
	*sqlite.Store
	fail atomic.Bool
}

func (s *flakyGauger) Gauges(ctx context.Context, minAttempts int) (store.Gauges, error) {
	if s.fail.Load() {
		return store.Gauges{}, context.DeadlineExceeded
	}
	return s.Store.Gauges(ctx, minAttempts)
}

// TestGaugesKeepTheirValueThroughAFailedReading: a reading that fails now
// and then (a timeout on a slow database) no longer takes the store
// gauges out of /metrics until the next one, which made alerts on them
// flap; they keep their last value for gaugesHeldFor, then are left out
// while readings keep failing, and come back with the next good one.
func TestGaugesKeepTheirValueThroughAFailedReading(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	gaugeFixture(e)
	s := &flakyGauger{Store: e.s}
	rn, reg := runWithoutFleet(e, s)
	first := storeSays(e)
	exportsStoreGauges(t, "first reading", reg, first)

	s.fail.Store(true)
	step := max(rn.r.heartbeatEvery(), monitorEvery)
	held := maps.Clone(first)
	for elapsed := step; elapsed < gaugesHeldFor; elapsed += step {
		rn.readGauges()
		// The oldest dead letter's age goes on growing from the held time.
		held["backstop_dlq_oldest_age_seconds"] = first["backstop_dlq_oldest_age_seconds"] + elapsed.Seconds()
		exportsStoreGauges(t, "a failed reading within a minute of the last good one", reg, held)
	}
	rn.readGauges()
	exportsStoreGauges(t, "readings failing for over a minute", reg, nil)

	s.fail.Store(false)
	rn.readGauges()
	exportsStoreGauges(t, "the next good reading", reg, storeSays(e))
	if err := rn.stop(); err != nil {
		t.Fatal(err)
	}
}
