package storetest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// RunFleet runs the conformance tests of store.Fleet against the stores h
// opens, which must implement it.
func RunFleet(t *testing.T, h Harness) {
	for _, tc := range fleetCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, h)
		})
	}
}

var fleetCases = []testCase{
	{"CircuitOpensOnceForTheFleet", testCircuitOpensOnce},
	{"OneProbeTokenPerInterval", testProbeToken},
	{"PauseHoldsProbes", testPause},
	{"ClockSteppedBackHoldsNothing", testClockSteppedBack},
	{"Leadership", testLeadership},
	{"HeartbeatAndReap", testHeartbeatAndReap},
	{"DeadInstanceAfterAClockSteppedBack", testDeadInstanceAfterAClockSteppedBack},
	{"LeadershipAfterAClockSteppedBack", testLeadershipAfterAClockSteppedBack},
	{"RetriesFollowAClockSteppedBack", testRetriesFollowAClockSteppedBack},
	{"LiveInstances", testLiveInstances},
	{"LeaveFleet", testLeaveFleet},
	{"SweepBatch", testSweepBatch},
	{"IdempotencyKeysExpire", testIdempotencyKeysExpire},
	{"IdempotencyWindowOutlastsAClockStep", testIdempotencyWindowAcrossAStep},
	{"PendingByDestination", testPendingByDestination},
	{"BadCircuitRowsAreReadPast", testBadCircuits},
}

func fleetOf(t *testing.T, e *env) store.Fleet {
	t.Helper()
	f, ok := e.s.(store.Fleet)
	if !ok {
		t.Fatalf("%T does not implement store.Fleet", e.s)
	}
	return f
}

func (e *env) circuit(f store.Fleet, destination string) store.Circuit {
	e.t.Helper()
	cs, err := f.Circuits(e.ctx)
	if err != nil {
		e.t.Fatalf("Circuits: %v", err)
	}
	for _, c := range cs {
		if c.Destination == destination {
			return c
		}
	}
	return store.Circuit{Destination: destination}
}

func testCircuitOpensOnce(t *testing.T, h Harness) {
	e := newEnv(t, h)
	f := fleetOf(t, e)
	if c := e.circuit(f, "hooks"); c.Open {
		t.Fatalf("a destination nobody opened is open: %+v", c)
	}
	opened, err := f.OpenCircuit(e.ctx, "hooks", "a", time.Second)
	if err != nil || !opened {
		t.Fatalf("OpenCircuit = %v, %v", opened, err)
	}
	e.clk.Advance(500 * time.Millisecond)
	if again, err := f.OpenCircuit(e.ctx, "hooks", "b", time.Second); err != nil || again {
		t.Fatalf("a second OpenCircuit = %v, %v: want false, the circuit is open", again, err)
	}
	c := e.circuit(f, "hooks")
	if !c.Open || c.OpenedBy != "a" || !c.OpenedAt.Equal(epoch) || !c.NextProbe.Equal(epoch.Add(time.Second)) || c.ProbeDue {
		t.Fatalf("circuit = %+v", c)
	}
	if err := f.CloseCircuit(e.ctx, "hooks", "b"); err != nil {
		t.Fatal(err)
	}
	if c := e.circuit(f, "hooks"); c.Open || c.ProbeDue {
		t.Fatalf("closed circuit = %+v", c)
	}
	if opened, err := f.OpenCircuit(e.ctx, "hooks", "b", 2*time.Second); err != nil || !opened {
		t.Fatalf("reopening = %v, %v", opened, err)
	}
	if c := e.circuit(f, "hooks"); c.OpenedBy != "b" || !c.NextProbe.Equal(e.clk.Now().Add(2*time.Second)) {
		t.Fatalf("reopened circuit = %+v", c)
	}
	// Odd names are kept as given.
	odd := "hooks\x01\"';--é"
	if opened, err := f.OpenCircuit(e.ctx, odd, "a", time.Second); err != nil || !opened {
		t.Fatalf("OpenCircuit(odd name) = %v, %v", opened, err)
	}
	if c := e.circuit(f, odd); !c.Open {
		t.Fatalf("odd name's circuit = %+v", c)
	}
}

func testProbeToken(t *testing.T, h Harness) {
	e := newEnv(t, h)
	f := fleetOf(t, e)
	take := func(instance string) bool {
		t.Helper()
		ok, err := f.TakeProbe(e.ctx, "hooks", instance, 4*time.Second)
		if err != nil {
			t.Fatalf("TakeProbe: %v", err)
		}
		return ok
	}
	if take("a") {
		t.Fatal("a probe token of a closed circuit")
	}
	if _, err := f.OpenCircuit(e.ctx, "hooks", "a", time.Second); err != nil {
		t.Fatal(err)
	}
	if take("a") {
		t.Fatal("a probe token before the first probe is due")
	}
	// Due at 1 s; each token taken doubles the interval (up to the 4 s
	// cap) and makes the next probe due that much later: 2 s, 4 s, 4 s.
	at := time.Second
	for i, wait := range []time.Duration{2 * time.Second, 4 * time.Second, 4 * time.Second, 4 * time.Second} {
		e.clk.Set(epoch.Add(at))
		if !e.circuit(f, "hooks").ProbeDue {
			t.Fatalf("probe %d not due at %v", i+1, at)
		}
		// Three instances race for the token: one gets it.
		var mu sync.Mutex
		got := 0
		var wg sync.WaitGroup
		for _, in := range []string{"a", "b", "c"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok, err := f.TakeProbe(e.ctx, "hooks", in, 4*time.Second)
				if err != nil {
					t.Errorf("TakeProbe: %v", err)
				}
				if ok {
					mu.Lock()
					got++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if got != 1 {
			t.Fatalf("probe %d: %d instances took the token, want 1", i+1, got)
		}
		c := e.circuit(f, "hooks")
		if !c.NextProbe.Equal(epoch.Add(at+wait)) || c.ProbeDue {
			t.Fatalf("probe %d: circuit %+v, want the next probe at +%v", i+1, c, at+wait)
		}
		e.clk.Set(epoch.Add(at + wait - time.Millisecond))
		if take("a") {
			t.Fatalf("probe %d: a token before the next probe is due", i+1)
		}
		at += wait
	}
}

func testPause(t *testing.T, h Harness) {
	e := newEnv(t, h)
	f := fleetOf(t, e)
	if err := f.PauseDestination(e.ctx, "api", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := f.PauseDestination(e.ctx, "api", 10*time.Second); err != nil { // never shortened
		t.Fatal(err)
	}
	c := e.circuit(f, "api")
	if !c.Paused || c.Open || !c.PausedUntil.Equal(epoch.Add(time.Minute)) {
		t.Fatalf("paused = %+v", c)
	}
	if _, err := f.OpenCircuit(e.ctx, "api", "a", time.Second); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(30 * time.Second)
	if ok, err := f.TakeProbe(e.ctx, "api", "a", time.Minute); err != nil || ok {
		t.Fatalf("a probe token during a pause: %v, %v", ok, err)
	}
	e.clk.Advance(30 * time.Second)
	if c := e.circuit(f, "api"); c.Paused || !c.ProbeDue {
		t.Fatalf("after the pause = %+v", c)
	}
	if ok, err := f.TakeProbe(e.ctx, "api", "a", time.Minute); err != nil || !ok {
		t.Fatalf("no probe token after the pause: %v, %v", ok, err)
	}
}

// testClockSteppedBack steps the store's clock back an hour under an open
// circuit and a pause: the probe due in a second, and the pause of a
// minute, must not wait an hour for the clock to catch up again.
func testClockSteppedBack(t *testing.T, h Harness) {
	e, clk, f := steppedEnv(t, h)
	if _, err := f.OpenCircuit(e.ctx, "hooks", "a", time.Second); err != nil {
		t.Fatal(err)
	}
	if err := f.PauseDestination(e.ctx, "api", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := f.PauseDestination(e.ctx, "long", 10*time.Hour); err != nil {
		t.Fatal(err)
	}
	if c := e.circuit(f, "long"); !c.Paused || !c.PausedUntil.Equal(epoch.Add(store.MaxPause)) {
		t.Fatalf("a pause of 10 h = %+v, want one of store.MaxPause", c)
	}
	back := epoch.Add(-time.Hour)
	clk.back.Store(int64(time.Hour))
	if c := e.circuit(f, "hooks"); !c.ProbeDue {
		t.Fatalf("an hour back, the circuit = %+v, want its probe due", c)
	}
	if ok, err := f.TakeProbe(e.ctx, "hooks", "a", 5*time.Second); err != nil || !ok {
		t.Fatalf("an hour back, no probe token: %v, %v", ok, err)
	}
	if c := e.circuit(f, "hooks"); !c.NextProbe.Equal(back.Add(2*time.Second)) || c.ProbeDue {
		t.Fatalf("after the probe = %+v, want the next one 2 s after the new now", c)
	}
	if ok, err := f.TakeProbe(e.ctx, "hooks", "b", 5*time.Second); err != nil || ok {
		t.Fatalf("a second token at once: %v, %v", ok, err)
	}
	if c := e.circuit(f, "api"); c.Paused {
		t.Fatalf("an hour back, the pause of a minute = %+v, want it holding nothing", c)
	}
	if _, err := f.OpenCircuit(e.ctx, "api", "a", time.Second); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(time.Second)
	if ok, err := f.TakeProbe(e.ctx, "api", "a", 5*time.Second); err != nil || !ok {
		t.Fatalf("a pause set before the step held the probe: %v, %v", ok, err)
	}
	// A pause asked for after the step holds, though the one set before
	// it ends later: that one holds nothing, and is not kept in its stead
	// (it was, and the fleet paused nothing until the clock caught up).
	if err := f.PauseDestination(e.ctx, "api", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if c := e.circuit(f, "api"); !c.Paused || !c.PausedUntil.Equal(clk.Now().Add(30*time.Second)) {
		t.Fatalf("a pause of 30 s asked for after the step = %+v, want it holding until %v", c, clk.Now().Add(30*time.Second))
	}
}

// steppedEnv is an env on a store whose clock can be stepped back, with
// its clock and its Fleet.
func steppedEnv(t *testing.T, h Harness) (*env, *steppedClock, store.Fleet) {
	t.Helper()
	clk := &steppedClock{Fake: clock.NewFake(epoch)}
	s, err := h.Open(t, baseConfig(clk))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	e := &env{t: t, h: h, s: s, clk: clk.Fake, ctx: context.Background()}
	return e, clk, fleetOf(t, e)
}

// steppedClock is a fake clock that can also be stepped back, as a
// wall clock is (clock.Fake only goes forward).
type steppedClock struct {
	*clock.Fake
	back atomic.Int64 // how far Now is behind the fake clock
}

func (c *steppedClock) Now() time.Time { return c.Fake.Now().Add(-time.Duration(c.back.Load())) }

func testLeadership(t *testing.T, h Harness) {
	e := newEnv(t, h)
	f := fleetOf(t, e)
	lead := func(in string) bool {
		t.Helper()
		ok, err := f.AcquireLeadership(e.ctx, in, 10*time.Second)
		if err != nil {
			t.Fatalf("AcquireLeadership(%s): %v", in, err)
		}
		return ok
	}
	if !lead("a") || lead("b") {
		t.Fatal("a should lead, b not")
	}
	e.clk.Advance(9 * time.Second)
	if !lead("a") { // renewed to +19 s
		t.Fatal("the leader could not renew")
	}
	e.clk.Advance(9 * time.Second)
	if lead("b") {
		t.Fatal("b took an unexpired leadership")
	}
	e.clk.Advance(time.Second) // a's lease runs out: a died
	if !lead("b") || lead("a") {
		t.Fatal("b should take over from a silent leader")
	}
	if err := f.ResignLeadership(e.ctx, "a"); err != nil { // not a's: nothing
		t.Fatal(err)
	}
	if lead("a") {
		t.Fatal("a resigned b's leadership")
	}
	if err := f.ResignLeadership(e.ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if !lead("a") {
		t.Fatal("a could not lead after b resigned")
	}
}

func testHeartbeatAndReap(t *testing.T, h Harness) {
	e := newEnv(t, h)
	f := fleetOf(t, e)
	m := e.enqueue(msg("hooks", "s"))[0]
	if err := f.Heartbeat(e.ctx, store.Instance{ID: "a", Host: "h", PID: 1}); err != nil {
		t.Fatal(err)
	}
	if got := e.batch("a", store.Batch{SkipMaintenance: true, Claim: store.ClaimRequest{Limit: 1}}).Claimed; len(got) != 1 {
		t.Fatalf("claimed %d", len(got))
	}
	e.clk.Advance(50 * time.Second)
	if err := f.Heartbeat(e.ctx, store.Instance{ID: "b"}); err != nil {
		t.Fatal(err)
	}
	if n, err := f.ReapDeadInstances(e.ctx, "b"); err != nil || n != 0 {
		t.Fatalf("reaped %d, %v: a is alive", n, err)
	}
	e.clk.Advance(11 * time.Second) // a silent for 61 s
	// A batch that skips maintenance reaps nobody.
	if res := e.batch("b", store.Batch{SkipMaintenance: true}); res.DeadInstances != 0 {
		t.Fatalf("a SkipMaintenance batch reaped %d", res.DeadInstances)
	}
	if n, err := f.ReapDeadInstances(e.ctx, "b"); err != nil || n != 1 {
		t.Fatalf("reaped %d, %v: want a", n, err)
	}
	got, err := e.s.Get(e.ctx, m.ID)
	if err != nil || got.InstanceID != "" {
		t.Fatalf("the dead instance's lease was kept: %+v, %v", got, err)
	}
}

// A relay dies holding a lease, and the clock is then stepped back an
// hour. Its heart-beat, stamped an hour ahead, kept it alive for the hour,
// and its lease with it: the message waited an hour more for nothing. A
// heart-beat further ahead than the instance timeout is now taken as of
// the reaping (it can only come from a step), so the dead instance goes
// one timeout later; a live one heart-beats again in time and stays.
func testDeadInstanceAfterAClockSteppedBack(t *testing.T, h Harness) {
	e, clk, f := steppedEnv(t, h)
	dead := e.enqueue(msg("hooks", "s1"))[0]
	live := e.enqueue(msg("hooks", "s2"))[0]
	for _, in := range []string{"a", "c"} {
		if err := f.Heartbeat(e.ctx, store.Instance{ID: in}); err != nil {
			t.Fatal(err)
		}
		if got := e.batch(in, store.Batch{SkipMaintenance: true, Claim: store.ClaimRequest{Limit: 1}}).Claimed; len(got) != 1 {
			t.Fatalf("%s claimed %d", in, len(got))
		}
	}
	clk.back.Store(int64(time.Hour)) // a dies; c lives on
	for range 4 {                    // two minutes: twice the instance timeout
		e.clk.Advance(30 * time.Second)
		if err := f.Heartbeat(e.ctx, store.Instance{ID: "c"}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.ReapDeadInstances(e.ctx, "b"); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := e.s.Get(e.ctx, dead.ID); err != nil || got.InstanceID != "" {
		t.Fatalf("two minutes after the step, the dead instance's lease is kept: %+v, %v", got, err)
	}
	if got, err := e.s.Get(e.ctx, live.ID); err != nil || got.InstanceID != "c" {
		t.Fatalf("the live instance lost its lease to the step: %+v, %v", got, err)
	}
	if got := e.batch("b", store.Batch{SkipMaintenance: true, Claim: store.ClaimRequest{Limit: 10}}).Claimed; len(got) != 1 || got[0].ID != dead.ID {
		t.Fatalf("claimed %v after the dead instance was reaped, want its message", got)
	}
}

// The leader dies, and the clock is then stepped back an hour: its term,
// stamped ahead, kept every other instance from leading (and so from
// reaping and sweeping) for the hour. A term further ahead than twice the
// asker's is taken as one set before a step.
func testLeadershipAfterAClockSteppedBack(t *testing.T, h Harness) {
	e, clk, f := steppedEnv(t, h)
	if ok, err := f.AcquireLeadership(e.ctx, "a", 10*time.Second); err != nil || !ok {
		t.Fatalf("a: %v, %v", ok, err)
	}
	if ok, err := f.AcquireLeadership(e.ctx, "b", 10*time.Second); err != nil || ok {
		t.Fatalf("b during a's term: %v, %v", ok, err)
	}
	clk.back.Store(int64(time.Hour)) // a dies
	if ok, err := f.AcquireLeadership(e.ctx, "b", 10*time.Second); err != nil || !ok {
		t.Fatalf("b an hour back, after a died: %v, %v; want the lead", ok, err)
	}
	if ok, err := f.AcquireLeadership(e.ctx, "c", 10*time.Second); err != nil || ok {
		t.Fatalf("c during b's term after the step: %v, %v", ok, err)
	}
}

func testSweepBatch(t *testing.T, h Harness) {
	e := newEnv(t, h, func(c *store.Config) { c.Retention = time.Hour; c.DefaultPolicy.Ordering = outbox.OrderingNone })
	f := fleetOf(t, e)
	ms := e.enqueue(msgs(5, "hooks", "")...)
	claimed := e.claim("a", 5)
	ids := make([]store.Completion, len(claimed))
	for i, m := range claimed {
		ids[i] = store.Completion{ID: m.ID, Status: outbox.StatusPublished}
	}
	e.batch("a", store.Batch{Completions: ids})
	if n, err := f.SweepBatch(e.ctx, 10); err != nil || n != 0 {
		t.Fatalf("swept %d, %v inside the retention", n, err)
	}
	e.clk.Advance(time.Hour)
	for _, want := range []int{2, 2, 1, 0} {
		if n, err := f.SweepBatch(e.ctx, 2); err != nil || n != want {
			t.Fatalf("SweepBatch(2) = %d, %v; want %d", n, err, want)
		}
	}
	for _, m := range ms {
		if _, err := e.s.Get(e.ctx, m.ID); err == nil {
			t.Fatalf("%s was not swept", m.ID)
		}
	}
}

// Idempotency keys are remembered for IdempotencyWindow, then swept,
// oldest first: they were kept for ever (one row per fanned-out topic
// message). A request repeated after the window writes again.
func testIdempotencyKeysExpire(t *testing.T, h Harness) {
	e := newEnv(t, h, func(c *store.Config) { c.IdempotencyWindow = time.Hour })
	f := fleetOf(t, e)
	adm, ok := e.s.(store.Admin)
	if !ok {
		t.Fatalf("%T does not implement store.Admin", e.s)
	}
	write := func(key string) bool {
		t.Helper()
		_, created, err := adm.EnqueueIdempotent(e.ctx, key, msg("hooks", ""))
		if err != nil {
			t.Fatal(err)
		}
		return created
	}
	for _, k := range []string{"k1", "k2", "k3"} {
		write(k)
	}
	e.clk.Advance(30 * time.Minute)
	write("k4")
	if n, err := f.SweepIdempotencyKeys(e.ctx, 10); err != nil || n != 0 {
		t.Fatalf("swept %d, %v inside the window", n, err)
	}
	if write("k1") {
		t.Fatal("k1 written again inside its window")
	}
	e.clk.Advance(30 * time.Minute)
	for _, want := range []int{2, 1, 0} {
		if n, err := f.SweepIdempotencyKeys(e.ctx, 2); err != nil || n != want {
			t.Fatalf("SweepIdempotencyKeys(2) = %d, %v; want %d", n, err, want)
		}
	}
	if !write("k1") {
		t.Error("k1 not written again after its window")
	}
	if write("k4") {
		t.Error("k4, still inside its window, was swept")
	}
}

// testIdempotencyWindowAcrossAStep: the clock steps forward an hour of a
// two-hour window (the store notices it at a claim) and then an hour and
// a half passes: a key written before the step looks three and a half
// hours old by its stamp, but it is an hour and a half old and stays; it
// goes once two hours and a bit have passed.
func testIdempotencyWindowAcrossAStep(t *testing.T, h Harness) {
	e := newEnv(t, h, func(c *store.Config) { c.IdempotencyWindow = 2 * time.Hour })
	f := fleetOf(t, e)
	adm, ok := e.s.(store.Admin)
	if !ok {
		t.Fatalf("%T does not implement store.Admin", e.s)
	}
	write := func() bool {
		t.Helper()
		_, created, err := adm.EnqueueIdempotent(e.ctx, "k", msg("hooks", ""))
		noErr(t, "EnqueueIdempotent", err)
		return created
	}
	e.claim("a", 1) // the store's reading of its clock before the step
	write()
	e.clk.Step(time.Hour)
	e.claim("a", 1) // notices the step
	e.clk.Advance(90 * time.Minute)
	n, err := f.SweepIdempotencyKeys(e.ctx, 10)
	noErr(t, "SweepIdempotencyKeys", err)
	eq(t, "keys swept an hour and a half after they were written", n, 0)
	eq(t, "written again inside its window", write(), false)
	e.clk.Advance(36 * time.Minute)
	n, err = f.SweepIdempotencyKeys(e.ctx, 10)
	noErr(t, "SweepIdempotencyKeys", err)
	eq(t, "keys swept past the window", n, 1)
}

func testPendingByDestination(t *testing.T, h Harness) {
	e := newEnv(t, h, withOrdering(outbox.OrderingNone))
	f := fleetOf(t, e)
	e.enqueue(msgs(3, "a", "")...)
	e.enqueue(msgs(2, "b-é", "")...)
	done := e.enqueue(msg("c", ""))[0]
	claimed := e.batch("i", store.Batch{Claim: store.ClaimRequest{Limit: 1, Destinations: []string{"c"}}}).Claimed
	if len(claimed) != 1 || claimed[0].ID != done.ID {
		t.Fatalf("claimed %v", claimed)
	}
	e.batch("i", store.Batch{Completions: []store.Completion{{ID: done.ID, Status: outbox.StatusPublished}}})
	dead := e.enqueue(msg("a", ""))[0]
	if err := e.s.DeadLetter(e.ctx, dead.ID, "by hand"); err != nil {
		t.Fatal(err)
	}
	got, err := f.PendingByDestination(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["a"] != 3 || got["b-é"] != 2 {
		t.Fatalf("PendingByDestination = %v", got)
	}
}

// testRetriesFollowAClockSteppedBack: a retry due in a minute, and a
// wait of two minutes after a fault blamed on the destination (a release),
// were scheduled; the clock is then stepped back an hour. Both are moved
// to their delay from the new now, and a time the application chose is
// kept. Before, both waited the hour on top of their delay: the store
// could not tell a retry's due time from an application's.
func testRetriesFollowAClockSteppedBack(t *testing.T, h Harness) {
	e, clk, _ := steppedEnv(t, h)
	rb, ok := e.s.(store.ScheduleRebaser)
	if !ok {
		t.Skip("the store does not move schedules after a clock step (store.ScheduleRebaser)")
	}
	rebase := func() int {
		t.Helper()
		n, err := rb.RebaseSchedules(e.ctx)
		if err != nil {
			t.Fatalf("RebaseSchedules: %v", err)
		}
		return n
	}
	strict := msgs(2, "d", "s")
	e.enqueue(strict[0])
	released := e.enqueue(msg("d", ""))[0]
	chosen := msg("d", "")
	chosen.ScheduledFor = epoch.Add(30 * time.Minute)
	e.enqueue(chosen)
	e.claimExactly("a", 10, strict[0], released)
	e.enqueue(strict[1])                                       // waits behind its stream's head
	e.fail("a", store.Failure{ID: strict[0].ID, Error: "503"}) // due in a minute (DurableBackoff)
	e.batch("a", store.Batch{Releases: []store.Release{{ID: released.ID, After: 2 * time.Minute, Error: "503"}}})
	if n := rebase(); n != 0 {
		t.Fatalf("RebaseSchedules moved %d before any step", n)
	}

	clk.back.Store(int64(time.Hour))
	if n := rebase(); n != 2 {
		t.Fatalf("RebaseSchedules moved %d after a step back of an hour, want the retry and the release", n)
	}
	if n := rebase(); n != 0 {
		t.Fatalf("RebaseSchedules moved %d more with the clock not stepped again", n)
	}
	now := clk.Now()
	timeEq(t, "the retry's due time", e.get(strict[0].ID).ScheduledFor, now.Add(time.Minute))
	timeEq(t, "the release's due time", e.get(released.ID).ScheduledFor, now.Add(2*time.Minute))
	timeEq(t, "the application's time", e.get(chosen.ID).ScheduledFor, epoch.Add(30*time.Minute))
	e.claimExactly("b", 10)
	e.clk.Advance(time.Minute)
	e.claimExactly("b", 10, strict...)
	e.complete("b", outbox.StatusPublished, strict[0].ID, strict[1].ID)
	e.clk.Advance(time.Minute)
	e.claimExactly("b", 10, released)
	e.complete("b", outbox.StatusPublished, released.ID)
	e.clk.Advance(28 * time.Minute)
	e.claimExactly("b", 10)
	e.clk.Advance(time.Hour)
	e.claimExactly("b", 10, chosen)
}

// testLiveInstances: the instances alive are those heard from within the
// InstanceTimeout (exactly the timeout is alive), whether or not the
// silent ones have been reaped yet.
func testLiveInstances(t *testing.T, h Harness) {
	e := newEnv(t, h)
	f := fleetOf(t, e)
	fc, ok := e.s.(store.FleetCounter)
	if !ok {
		t.Skip("the store counts no instances (store.FleetCounter)")
	}
	count := func(want int, when string) {
		t.Helper()
		if n, err := fc.LiveInstances(e.ctx); err != nil || n != want {
			t.Fatalf("%s: %d instances alive, %v; want %d", when, n, err, want)
		}
	}
	count(0, "none heard from")
	for _, id := range []string{"a", "b"} {
		if err := f.Heartbeat(e.ctx, store.Instance{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	count(2, "two heard from")
	e.clk.Advance(30 * time.Second)
	if err := f.Heartbeat(e.ctx, store.Instance{ID: "b"}); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(30 * time.Second) // a silent for exactly the timeout
	count(2, "a silent for exactly the timeout")
	e.clk.Advance(time.Millisecond)
	count(1, "a silent past the timeout, not reaped")
}

// testLeaveFleet: an instance that leaves is no longer counted alive, at
// once; the others still are; the leases it still holds stay its own
// until they lapse (its delivery may still be running), and a dead
// instance's reaping does not release them early.
func testLeaveFleet(t *testing.T, h Harness) {
	e := newEnv(t, h)
	f := fleetOf(t, e)
	fc, ok1 := e.s.(store.FleetCounter)
	fl, ok2 := e.s.(store.FleetLeaver)
	if !ok1 || !ok2 {
		t.Skip("the store counts no instances or has none leave (store.FleetCounter, store.FleetLeaver)")
	}
	for _, id := range []string{"a", "b"} {
		if err := f.Heartbeat(e.ctx, store.Instance{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	e.enqueue(&outbox.Message{Destination: "d", Type: "t"})
	held := e.claim("a", 1)
	if len(held) != 1 {
		t.Fatalf("a claimed %d, want 1", len(held))
	}
	noErr(t, "LeaveFleet", fl.LeaveFleet(e.ctx, "a"))
	noErr(t, "LeaveFleet of an instance never heard from", fl.LeaveFleet(e.ctx, "never"))
	if n, err := fc.LiveInstances(e.ctx); err != nil || n != 1 {
		t.Fatalf("after a left: %d instances alive, %v; want 1", n, err)
	}
	if n, err := f.ReapDeadInstances(e.ctx, "b"); err != nil || n != 0 {
		t.Fatalf("reaping after a left: %d dead, %v; want 0", n, err)
	}
	if got := e.claim("b", 1); len(got) != 0 {
		t.Fatalf("b claimed a's leased message while its lease runs")
	}
	e.clk.Advance(e.s.Config().LeaseDuration + time.Second)
	if got := e.claim("b", 1); len(got) != 1 {
		t.Fatalf("b claimed %d once a's lease lapsed, want 1", len(got))
	}
}
