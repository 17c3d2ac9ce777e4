package storetest

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// leaseTimeCases pin down Result.Now: the store's clock when the batch
// ran, from which the claim's and the renewals' expiries are computed, so
// that a caller can tell how long a lease the store granted whatever its
// own clock reads.
var leaseTimeCases = []testCase{
	{"NowIsTheStoreClockOfTheExpiries", func(t *testing.T, h Harness) { testLeaseTime(t, h, false) }},
	{"NowIsTheDatabaseClockOfTheExpiries", func(t *testing.T, h Harness) { testLeaseTime(t, h, true) }},
	{"NoLeaseLapsesForALeaseAfterTheClockStepsForward", testLeaseHoldAfterAStep},
	{"ALeaseHoldKeepsOtherProcessesOff", testLeaseHoldAcrossProcesses},
	{"ALongCallIsNoStep", testLongCallIsNoStep},
	{"ASecondStepWithinTheHoldLengthensIt", testLeaseHoldAcrossTwoSteps},
	{"AHoldLastsAsLongAsTheLeasesItHolds", testLeaseHoldOfLongLeases},
	{"AHoldEndsWhenTheLeasesItHoldsWouldHave", testLeaseHoldOfShortLeases},
	{"AStepPastTheInstanceTimeoutDeclaresNoLiveInstanceDead", testStepPastTheInstanceTimeout},
	{"OperatorsSeeALeaseHeldAcrossAStep", testOperatorsSeeAHeldLease},
}

// testOperatorsSeeAHeldLease: the clock steps forward past a lease that
// a live relay holds; a claim notices the step and holds the lease. What
// operators see and do reads the lease as a claim does, held until the
// hold ends: the message is listed leased, not ready, and counted in the
// leased gauge; Cancel refuses it; once dead-lettered by hand, its entry
// is not replayed under the relay. Before, they read the lease by the
// clock alone: the in-flight message was listed ready, and Cancel
// deleted it while its relay delivered it.
func testOperatorsSeeAHeldLease(t *testing.T, h Harness) {
	e := newEnv(t, h)
	a := adminOf(t, e)
	m := e.enqueue(msg("d", ""))[0]
	sameIDs(t, "claimed", e.claim("relay", 10), m)
	e.clk.Step(2 * time.Minute)
	sameIDs(t, "claimed at the step", e.claim("other", 10))

	list := func(state store.MessageState) []*outbox.Message {
		t.Helper()
		got, err := a.ListMessages(e.ctx, store.MessageFilter{State: state})
		noErr(t, "ListMessages "+string(state), err)
		return got
	}
	sameIDs(t, "listed leased during the hold", list(store.StateLeased), m)
	sameIDs(t, "listed ready during the hold", list(store.StateReady))
	if g, ok := e.s.(store.Gauger); ok {
		got, err := g.Gauges(e.ctx, 3)
		noErr(t, "Gauges", err)
		eq(t, "leased gauge during the hold", got.Leased, 1)
	}
	isErr(t, "Cancel during the hold", a.Cancel(e.ctx, m.ID), store.ErrLeased)

	noErr(t, "DeadLetter", e.s.DeadLetter(e.ctx, m.ID, "looks stuck")) // keeps the lease
	ent := onlyEntry(t, e, nil)
	q := e.s.DLQ()
	isErr(t, "Replay during the hold", q.Replay(e.ctx, ent.ID), dlq.ErrInFlight)
	would, err := q.ReplayMatching(e.ctx, nil, true)
	noErr(t, "ReplayMatching dry run", err)
	eq(t, "bulk replay candidates during the hold", len(would), 0)

	e.clk.Advance(time.Minute) // past the hold: the lease nobody renewed lapsed
	sameIDs(t, "listed leased after the hold", list(store.StateLeased))
	would, err = q.ReplayMatching(e.ctx, nil, true)
	noErr(t, "ReplayMatching dry run after the hold", err)
	eq(t, "bulk replay candidates after the hold", len(would), 1)
}

// testLeaseHoldOfLongLeases: relays with a ten-minute lease and with a
// 30 s one share a database. The clock steps forward eleven minutes:
// the long lease looks lapsed. A claim with a 30 s lease notices the step
// and must keep off it until its holder, which renews every third of its
// lease, has renewed it: a hold of one 30 s lease (and a claim honouring
// holds for two of its own leases) gave it away a minute after the step.
func testLeaseHoldOfLongLeases(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.enqueue(msg("d", ""))[0]
	long := store.ClaimRequest{Limit: 10, Lease: 10 * time.Minute}
	sameIDs(t, "claimed with a long lease", e.batch("a", store.Batch{Claim: long}).Claimed, m)
	beat := func() { // a is alive: it heart-beats every half minute
		e.clk.Advance(30 * time.Second)
		e.batch("a", store.Batch{})
	}
	beat()
	beat()
	e.clk.Step(11 * time.Minute)
	sameIDs(t, "claimed with a short lease at the step", e.claim("b", 10))
	beat()
	beat()
	sameIDs(t, "claimed a minute after the step", e.claim("b", 10))
	beat()
	e.clk.Advance(30 * time.Second) // a third of the long lease since it was taken: its holder renews
	res := e.batch("a", store.Batch{RenewLeases: []uuid.UUID{m.ID}, Claim: store.ClaimRequest{Lease: 10 * time.Minute}})
	eq(t, "renewed on the stepped clock", len(res.Renewed), 1)
	for range 18 { // past the hold: the renewed lease holds
		beat()
	}
	sameIDs(t, "claimed after the hold", e.claim("b", 10))
}

// testLeaseHoldOfShortLeases: an instance claiming with a ten-minute
// lease notices a step of six minutes, past the 30 s leases another
// instance holds and no longer renews (alive, it heart-beats). The hold
// lasts until those leases end as they would have without the step, not
// for the noticing claim's ten minutes: a strict stream's head and an
// unordered message alike are claimed once it is over.
func testLeaseHoldOfShortLeases(t *testing.T, h Harness) {
	e := newEnv(t, h)
	free, head := msg("d", ""), msg("d", "s")
	e.enqueue(free, head)
	sameIDs(t, "claimed before the step", e.claim("a", 10), free, head)

	e.clk.Step(6 * time.Minute)
	long := e.batch("x", store.Batch{Claim: store.ClaimRequest{Limit: 10, Lease: 10 * time.Minute}})
	sameIDs(t, "claimed at the step with a long lease", long.Claimed)
	sameIDs(t, "claimed at the step", e.claim("b", 10))
	e.clk.Advance(25 * time.Second)
	e.batch("a", store.Batch{}) // alive, it heart-beats, but renews neither
	sameIDs(t, "claimed before the leases would have ended", e.claim("b", 10))
	e.clk.Advance(6 * time.Second)
	sameIDs(t, "claimed once they would have ended", e.claim("b", 10), free, head)
}

// longCall is a fake clock on which, once armed, 20 s pass right after
// the next reading: a store call that reads the clock as it starts and
// lasts 20 s.
type longCall struct {
	*clock.Fake
	armed *atomic.Bool
}

func (c longCall) Now() time.Time {
	t := c.Fake.Now()
	if c.armed.CompareAndSwap(true, false) {
		c.Fake.Advance(20 * time.Second)
	}
	return t
}

// testLongCallIsNoStep: one store call lasts 20 s after reading the
// clock, more than half the 30 s lease. That is time passing, not a step
// of the clock: the lease its holder no longer renews lapses on time and
// another instance takes it. (When the reading was paired with the
// monotonic time after the call, the next call found the clock 20 s past
// what it expected, recorded a step, and held the lapsed lease a lease
// longer: TestRelayKilledMidBatch failed so under load, where the fake
// clock moved while a call was under way.)
func testLongCallIsNoStep(t *testing.T, h Harness) {
	lc := longCall{armed: &atomic.Bool{}}
	e := newEnv(t, h, func(c *store.Config) {
		lc.Fake = c.Clock.(*clock.Fake)
		c.Clock = lc
	})
	m := e.enqueue(msg("d", ""))[0]
	sameIDs(t, "claimed", e.claim("a", 10), m)
	lc.armed.Store(true)
	sameIDs(t, "claimed by another instance in a long call", e.claim("b", 10))
	sameIDs(t, "claimed 20 s on", e.claim("b", 10))
	e.clk.Advance(15 * time.Second) // past the lease
	sameIDs(t, "claimed once the lease lapsed", e.claim("b", 10), m)
}

// testLeaseHoldAcrossProcesses: three stores on one database, as three
// processes. The clock steps forward past the leases one of them holds.
// The other that read the clock before tells the step itself; a third
// opened after the step, which cannot, keeps off the leases by the hold
// the others recorded. Once the hold is over, the lease nobody renewed
// lapses for it.
func testLeaseHoldAcrossProcesses(t *testing.T, h Harness) {
	if h.Reopen == nil {
		t.Skip("the harness opens no second store on a database")
	}
	e := newEnv(t, h)
	other := h.Reopen(t, e.s, e.cfg)
	claimOn := func(s store.Store, instance string) []*outbox.Message {
		t.Helper()
		res, err := s.ProcessBatch(e.ctx, &store.Batch{Instance: store.Instance{ID: instance}, Claim: store.ClaimRequest{Limit: 10}})
		if err != nil {
			t.Fatalf("ProcessBatch(%s): %v", instance, err)
		}
		return res.Claimed
	}
	sameIDs(t, "claimed by the other process before any message", claimOn(other, "b"))
	m := e.enqueue(msg("d", ""))[0]
	sameIDs(t, "claimed", e.claim("a", 10), m)

	e.clk.Step(45 * time.Second)
	sameIDs(t, "claimed at the step by the process that read the clock before", claimOn(other, "b"))
	late := h.Reopen(t, e.s, e.cfg)
	sameIDs(t, "claimed at the step by a process opened after it", claimOn(late, "c"))
	e.clk.Advance(31 * time.Second)
	sameIDs(t, "claimed once the hold is over", claimOn(late, "c"), m)
}

// testLeaseHoldAcrossTwoSteps: the clock steps forward past the lease,
// and again, by less than a lease, before the hold of the first step
// ends. The lease its holder renewed between the steps looks that much
// shorter: the hold must last a lease from the second step, or the lease
// lapses for another instance before its holder's next renewal (a third
// of a lease after the last).
func testLeaseHoldAcrossTwoSteps(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.enqueue(msg("d", ""))[0]
	sameIDs(t, "claimed before the steps", e.claim("a", 10), m)

	e.clk.Step(45 * time.Second)
	sameIDs(t, "claimed by another instance at the first step", e.claim("b", 10))
	e.clk.Advance(4 * time.Second)
	res := e.batch("a", store.Batch{RenewLeases: []uuid.UUID{m.ID}})
	eq(t, "renewed on the stepped clock", len(res.Renewed), 1)
	e.clk.Advance(time.Second)
	e.clk.Step(24 * time.Second) // 25 s of the 30 s lease renewed 1 s ago are gone
	sameIDs(t, "claimed by another instance at the second step", e.claim("b", 10))
	e.clk.Advance(7 * time.Second) // 8 s since the renewal: the holder renews at 10 s
	sameIDs(t, "claimed before the holder's next renewal", e.claim("b", 10))

	e.clk.Advance(24 * time.Second) // a lease and a second past the second step
	sameIDs(t, "claimed once the second step's hold is over", e.claim("b", 10), m)
}

// testStepPastTheInstanceTimeout: the clock steps forward further than
// the instance timeout (60 s): every heartbeat looks older than it, but
// their instances are alive. Neither a claim's maintenance nor the
// fleet's reaping, once a claim noticed the step, declares them dead and
// frees their leases, which the hold keeps; an instance silent for the
// timeout after the step is dead.
func testStepPastTheInstanceTimeout(t *testing.T, h Harness) {
	e := newEnv(t, h)
	f := fleetOf(t, e)
	m := e.enqueue(msg("d", ""))[0]
	sameIDs(t, "claimed before the step", e.claim("a", 10), m)

	e.clk.Step(90 * time.Second)
	res := e.batch("b", store.Batch{Claim: store.ClaimRequest{Limit: 10}})
	eq(t, "instances declared dead at the step", res.DeadInstances, 0)
	sameIDs(t, "claimed by another instance at the step", res.Claimed)
	n, err := f.ReapDeadInstances(e.ctx, "b")
	noErr(t, "ReapDeadInstances", err)
	eq(t, "instances reaped at the step", n, 0)
	e.clk.Advance(10 * time.Second)
	eq(t, "renewed on the stepped clock", len(e.batch("a", store.Batch{RenewLeases: []uuid.UUID{m.ID}}).Renewed), 1)
	e.clk.Advance(25 * time.Second) // the hold is over
	sameIDs(t, "claimed after the hold", e.claim("b", 10))

	e.clk.Advance(61 * time.Second) // a is silent for longer than the timeout
	n, err = f.ReapDeadInstances(e.ctx, "b")
	noErr(t, "ReapDeadInstances", err)
	eq(t, "instances reaped once a was silent for the timeout", n, 1)
}

// testLeaseHoldAfterAStep: the store's clock steps forward past the
// leases while no time passes (NTP correcting the database host). Every
// lease looks lapsed, but their holder is alive and delivering: for one
// lease from the step no claim takes any, whoever asks. The holder renews
// one on the stepped clock; once the hold ends, the leases it did not
// renew (a strict stream's run) lapse and the renewed one stays.
func testLeaseHoldAfterAStep(t *testing.T, h Harness) {
	e := newEnv(t, h)
	free, head, next := msg("d", ""), msg("d", "s"), msg("d", "s")
	e.enqueue(free, head, next)
	sameIDs(t, "claimed before the step", e.claim("a", 10), free, head, next) // a stream's run

	e.clk.Step(45 * time.Second) // past the 30 s leases, with no time passing
	sameIDs(t, "claimed by another instance at the step", e.claim("b", 10))
	e.clk.Advance(10 * time.Second)
	res := e.batch("a", store.Batch{RenewLeases: []uuid.UUID{free.ID}})
	eq(t, "renewed on the stepped clock", len(res.Renewed), 1)
	e.clk.Advance(19 * time.Second)
	sameIDs(t, "claimed within a lease of the step", e.claim("b", 10))

	e.clk.Advance(2 * time.Second) // the hold is over
	sameIDs(t, "claimed after the hold", e.claim("b", 10), head, next)
	sameIDs(t, "claimed again", e.claim("c", 10))
}

// leaseTimeTolerance is how far Expiry − Now may be from the lease: the
// stores keep times to the millisecond or finer.
const leaseTimeTolerance = time.Millisecond

// testLeaseTime claims with one lease and renews with another, on the
// suite's fake clock or (dbClock) on the store's own clock (Config.Clock
// nil), and checks that each expiry is Result.Now plus the lease asked
// for.
func testLeaseTime(t *testing.T, h Harness, dbClock bool) {
	var opts []option
	if dbClock {
		opts = append(opts, func(c *store.Config) { c.Clock = nil })
	}
	e := newEnv(t, h, opts...)
	m := e.enqueue(msg("d", ""))[0]
	res := e.batch("a", store.Batch{Claim: store.ClaimRequest{Limit: 1, Lease: 45 * time.Second}})
	if res.Now.IsZero() {
		t.Fatal("Result.Now of a claim is zero")
	}
	if !dbClock {
		timeEq(t, "Result.Now of the claim", res.Now, epoch)
	}
	sameIDs(t, "claimed", res.Claimed, m)
	leaseNear(t, "claim: LeaseExpiry − Now", res.Claimed[0].LeaseExpiry.Sub(res.Now), 45*time.Second)

	if !dbClock {
		e.clk.Advance(10 * time.Second)
	}
	res = e.batch("a", store.Batch{RenewLeases: []uuid.UUID{m.ID}, Claim: store.ClaimRequest{Lease: time.Minute}})
	if res.Now.IsZero() {
		t.Fatal("Result.Now of a renewal is zero")
	}
	if !dbClock {
		timeEq(t, "Result.Now of the renewal", res.Now, epoch.Add(10*time.Second))
	}
	eq(t, "len(Renewed)", len(res.Renewed), 1)
	leaseNear(t, "renewal: Expiry − Now", res.Renewed[0].Expiry.Sub(res.Now), time.Minute)
}

func leaseNear(t *testing.T, what string, got, want time.Duration) {
	t.Helper()
	if d := got - want; d < -leaseTimeTolerance || d > leaseTimeTolerance {
		t.Fatalf("%s = %v, want %v (within %v)", what, got, want, leaseTimeTolerance)
	}
}
