package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// Cases of the claim at scale (docs/claim.md): per-destination caps,
// round-robin streams, heads that hide nothing else, lease expiries in the
// store's time. They are part of claimCases.

func testClaimPerDestination(t *testing.T, h Harness) {
	e := newEnv(t, h)
	slow := e.enqueue(append(msgs(3, "slow", ""), msgs(3, "slow", "s")...)...)
	fast := e.enqueue(append(msgs(2, "fast", ""), msgs(2, "fast", "f")...)...)
	r := e.batch("a", store.Batch{Claim: store.ClaimRequest{Limit: 20, PerDestination: map[string]int{"slow": 2}}})
	// The slow destination's messages are older, but it gets only its cap.
	sameIDs(t, "claimed", r.Claimed, slow[0], slow[1], fast[0], fast[1], fast[2], fast[3])
	r = e.batch("b", store.Batch{Claim: store.ClaimRequest{Limit: 20, PerDestination: map[string]int{"slow": 0, "fast": 5}}})
	sameIDs(t, "claimed (slow capped at 0)", r.Claimed)
	r = e.batch("b", store.Batch{Claim: store.ClaimRequest{Limit: 2, PerDestination: map[string]int{"slow": 10}}})
	sameIDs(t, "claimed (Limit below the cap)", r.Claimed, slow[2], slow[3])
}

func testClaimRoundRobin(t *testing.T, h Harness) {
	e := newEnv(t, h)
	deep := e.enqueue(msgs(30, "d", "deep")...)
	a, b, c := e.enqueue(msg("d", "a"))[0], e.enqueue(msg("d", "b"))[0], e.enqueue(msg("d", "c"))[0]
	first := e.claimExactly("x", 10, deep[:10]...)
	done := make([]store.Completion, len(first))
	for i, m := range first {
		done[i] = store.Completion{ID: m.ID, Status: outbox.StatusPublished}
	}
	// Served once, the deep stream waits behind the others: a seq-ordered
	// claim would take deep's next ten.
	r := e.batch("x", store.Batch{Completions: done, Claim: store.ClaimRequest{Limit: 10}})
	sameIDs(t, "claimed after the deep stream's turn", r.Claimed, append(deep[10:17:17], a, b, c)...)
}

func testClaimHeldHeads(t *testing.T, h Harness) {
	e := newEnv(t, h) // strict
	dead := e.enqueue(msgs(20, "d", "dead")...)
	leased := e.enqueue(msgs(20, "d", "leased")...)
	e.deadLetter("a", dead[0])
	e.claimExactly("a", 1, leased[0])
	free := e.enqueue(msgs(3, "d", "free")...)
	e.claimExactly("b", 100, free...)
	e.claimExactly("b", 100)
	n, err := e.s.ReleaseStream(e.ctx, "d", "dead")
	noErr(t, "ReleaseStream", err)
	eq(t, "released", n, 1)
	e.claimExactly("b", 100, dead[1:]...)
	e.complete("a", outbox.StatusPublished, leased[0].ID)
	e.claimExactly("c", 100, leased[1:]...)
}

func testClaimWakesOnTimeAndWrites(t *testing.T, h Harness) {
	e := newEnv(t, h) // strict, 30 s leases
	m := e.enqueue(msgs(2, "d", "s")...)
	e.claimExactly("a", 1, m[0])
	e.claimExactly("b", 10)
	// A write to a held stream changes nothing.
	m = append(m, e.enqueue(msg("d", "s"))...)
	e.claimExactly("b", 10)
	// The lease lapses: the stream is claimable without any write.
	e.clk.Advance(30 * time.Second)
	e.claimExactly("b", 10, m...)
	// The head fails: the rest is given back and waits for its retry.
	e.batch("b", store.Batch{
		Failures: []store.Failure{{ID: m[0].ID, Error: "x", RetryAfter: time.Minute}},
		Releases: []store.Release{{ID: m[1].ID}, {ID: m[2].ID}},
	})
	e.claimExactly("c", 10)
	e.clk.Advance(time.Minute)
	got := e.claimExactly("c", 10, m...)
	eq(t, "Attempts", got[0].Attempts, 1)
}

func testRenewReportsExpiry(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.enqueue(msg("d", ""), msg("d", ""))
	got := e.claimExactly("a", 10, m...)
	timeEq(t, "claimed LeaseExpiry", got[0].LeaseExpiry, epoch.Add(30*time.Second))
	e.clk.Advance(10 * time.Second)
	other := uuid.New()
	r := e.batch("a", store.Batch{RenewLeases: []uuid.UUID{m[1].ID, other, m[0].ID}})
	if len(r.Renewed) != 2 {
		t.Fatalf("Renewed = %v, want both leases", r.Renewed)
	}
	for _, l := range r.Renewed {
		if l.ID != m[0].ID && l.ID != m[1].ID {
			t.Fatalf("Renewed holds %s", l.ID)
		}
		timeEq(t, fmt.Sprintf("Renewed expiry of %s", l.ID), l.Expiry, epoch.Add(40*time.Second))
		timeEq(t, "stored LeaseExpiry", e.get(l.ID).LeaseExpiry, l.Expiry)
	}
	sameUUIDs(t, "Stale", r.Stale, other)
	r = e.batch("b", store.Batch{RenewLeases: []uuid.UUID{m[0].ID}})
	eq(t, "Renewed by a non-holder", len(r.Renewed), 0)
}

// testSmallClaimLooksPastIdleStreams: a claim of one (a breaker's probe)
// finds a claimable head even when the stream whose turn comes first
// gives nothing, its head woken by a change but due only later.
func testSmallClaimLooksPastIdleStreams(t *testing.T, h Harness) {
	e := newEnv(t, h) // strict
	a := e.enqueue(msg("d", "a"))
	b := e.enqueue(msg("d", "b"))
	e.claimExactly("x", 10, a[0], b[0])
	// Both are given back, a first and until later: both streams wake,
	// a's turn first.
	e.batch("x", store.Batch{Releases: []store.Release{{ID: a[0].ID, After: time.Hour}}})
	e.batch("x", store.Batch{Releases: []store.Release{{ID: b[0].ID}}})
	e.claimExactly("y", 1, b[0])
}

// testSmallClaimPassesOverUnorderedLeases: under a destination's ordering
// none, the leased messages of a stream hold nothing back, however many
// there are: a claim of one (a breaker's probe) still gets the next
// message. The stream still finds what it passed over: a message given
// back, and leases that lapse with nothing written.
func testSmallClaimPassesOverUnorderedLeases(t *testing.T, h Harness) {
	e := newEnv(t, h, withOrdering(outbox.OrderingNone)) // 30 s leases
	m := e.enqueue(msgs(40, "d", "s")...)
	e.claimExactly("a", 35, m[:35]...)
	e.clk.Advance(10 * time.Second)
	e.claimExactly("b", 1, m[35])
	e.claimExactly("b", 10, m[36:]...)
	e.claimExactly("b", 10)
	// One of the first given back is claimed again.
	e.batch("a", store.Batch{Releases: []store.Release{{ID: m[3].ID}}})
	e.claimExactly("c", 1, m[3])
	// a's other leases lapse: claimable with nothing written.
	e.clk.Advance(20 * time.Second)
	e.claimExactly("d", 100, append(m[:3:3], m[4:35]...)...)
}

// testSmallClaimPassesOverLeasedUnorderedMessages: in a strict stream,
// messages of their own ordering none are claimed as unordered ones and
// hold nothing back while leased: a claim of one gets the strict message
// written after many of them at once.
func testSmallClaimPassesOverLeasedUnorderedMessages(t *testing.T, h Harness) {
	e := newEnv(t, h) // strict
	loose := msgs(40, "d", "s")
	for _, m := range loose {
		m.Ordering = outbox.OrderingNone
	}
	e.enqueue(loose...)
	e.claimExactly("a", 40, loose...)
	strict := e.enqueue(msg("d", "s"))
	e.claimExactly("b", 1, strict...)
}

// testClaimPastManyParked: parked messages that do not hold their
// stream (dead letters and retries not yet due under release ordering,
// dead letters of a strict stream released past them), however many,
// leave the messages behind them claimable in order, by a claim of any
// size (a breaker's probe of one too); the retries are claimed once due, in seq order.
func testClaimPastManyParked(t *testing.T, h Harness) {
	e := newEnv(t, h) // strict, seed 000's schedule: first retry after 1m
	const parked = 60
	loose := msgs(parked, "d", "r")
	for _, m := range loose {
		m.Ordering = outbox.OrderingRelease
	}
	e.enqueue(loose...)
	released := e.enqueue(msgs(parked, "e", "x")...)
	e.claimExactly("a", 2*parked, append(loose[:parked:parked], released...)...)
	var fs []store.Failure
	var retries []*outbox.Message
	for i, m := range loose {
		fs = append(fs, store.Failure{ID: m.ID, Error: "x", Permanent: i%2 == 0})
		if i%2 == 1 {
			retries = append(retries, m)
		}
	}
	for _, m := range released {
		fs = append(fs, store.Failure{ID: m.ID, Error: "x", Permanent: true})
	}
	r := e.batch("a", store.Batch{Failures: fs})
	eq(t, "dead-lettered", len(r.DeadLettered), parked/2+parked)
	n, err := e.s.ReleaseStream(e.ctx, "e", "x")
	noErr(t, "ReleaseStream", err)
	eq(t, "released", n, parked)
	liveR := msgs(3, "d", "r")
	for _, m := range liveR {
		m.Ordering = outbox.OrderingRelease
	}
	e.enqueue(liveR...)
	liveX := e.enqueue(msgs(3, "e", "x")...)
	e.claimExactly("b", 2, liveR[0], liveR[1])
	// A leased message holds a release stream: the next waits for it.
	e.claimExactly("b", 10, liveX...)
	e.complete("b", outbox.StatusPublished, liveR[0].ID, liveR[1].ID)
	e.claimExactly("b", 1, liveR[2])
	e.complete("b", outbox.StatusPublished, liveR[2].ID, liveX[0].ID, liveX[1].ID, liveX[2].ID)
	e.claimExactly("b", 10)
	e.clk.Advance(time.Minute)
	e.claimExactly("c", 2*parked, retries...)
}
