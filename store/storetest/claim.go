package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

var claimCases = []testCase{
	{"LimitRespectedWithBigBacklog", testClaimLimit},
	{"ZeroLimitClaimsNothing", testClaimZeroLimit},
	{"ClaimedInSeqOrderAcrossStreams", testClaimSeqOrder},
	{"LeaseFieldsSetFromConfigOrRequest", testClaimLeaseFields},
	{"DestinationsFilter", testClaimDestinations},
	{"ExcludeDestinationsFilter", testClaimExclude},
	{"EarlierClaimableMessagesAreClaimedTogether", testClaimTogether},
	{"EmptyStreamIsUnordered", testClaimEmptyStream},
	{"StreamsAreScopedByDestination", testClaimStreamScope},
	{"PerMessageOrderingOverridesDestination", testClaimPerMessageOrdering},
	{"StrictMessagesBehindManyUnorderedOnes", testClaimPastUnorderedRun},
	{"PerDestinationOrderingPolicy", testClaimPerDestinationPolicy},
	{"LaterMessagesNeverHoldBackEarlierOnes", testClaimLaterDoesNotHold},
	{"ManyRetriesDoNotHoldAReleaseStream", testClaimPastManyRetries},
	{"PerDestinationCaps", testClaimPerDestination},
	{"StreamsServedRoundRobin", testClaimRoundRobin},
	{"ReadyStreamsShareAClaim", testReadyStreamsShareAClaim},
	{"HeldHeadsHideNothingElse", testClaimHeldHeads},
	{"HeldStreamsWakeOnTimeAndChanges", testClaimWakesOnTimeAndWrites},
	{"SmallClaimLooksPastIdleStreams", testSmallClaimLooksPastIdleStreams},
	{"SmallClaimPassesOverLeasesOfOrderingNone", testSmallClaimPassesOverUnorderedLeases},
	{"SmallClaimPassesOverLeasedMessagesOfOrderingNone", testSmallClaimPassesOverLeasedUnorderedMessages},
	{"ClaimPassesOverManyParkedMessages", testClaimPastManyParked},
	{"RenewalsReportTheStoresExpiry", testRenewReportsExpiry},
}

func testClaimLimit(t *testing.T, h Harness) {
	e := newEnv(t, h, withOrdering(outbox.OrderingNone))
	var all []*outbox.Message
	for s := range 20 {
		all = append(all, msgs(25, "d", fmt.Sprintf("s%d", s))...)
	}
	e.enqueue(all...)
	seen := map[string]bool{}
	for round := range 20 {
		got := e.claim(fmt.Sprintf("i%d", round), 25)
		if len(got) != 25 {
			t.Fatalf("round %d claimed %d, want 25", round, len(got))
		}
		for _, m := range got {
			if seen[m.ID.String()] {
				t.Fatalf("round %d claimed %s again", round, m.ID)
			}
			seen[m.ID.String()] = true
		}
	}
	e.claimExactly("last", 25)
}

func testClaimZeroLimit(t *testing.T, h Harness) {
	e := newEnv(t, h)
	e.enqueue(msgs(3, "d", "s")...)
	e.claimExactly("a", 0)
	if m := e.get(e.claim("a", 1)[0].ID); m.InstanceID != "a" {
		t.Fatalf("InstanceID = %q", m.InstanceID)
	}
}

func testClaimSeqOrder(t *testing.T, h Harness) {
	e := newEnv(t, h)
	var all []*outbox.Message
	for i := range 12 {
		all = append(all, msg("d", fmt.Sprintf("s%d", i%3)))
	}
	e.enqueue(all...)
	got := e.claimExactly("a", 100, all...)
	for i := 1; i < len(got); i++ {
		if got[i].Seq <= got[i-1].Seq {
			t.Fatalf("claimed out of Seq order: %s", label(got))
		}
	}
}

func testClaimLeaseFields(t *testing.T, h Harness) {
	e := newEnv(t, h)
	a, b := msg("d", "a"), msg("d", "b")
	e.enqueue(a, b)
	got := e.claimExactly("inst-1", 1, a)[0]
	eq(t, "InstanceID", got.InstanceID, "inst-1")
	timeEq(t, "LeaseExpiry (default)", got.LeaseExpiry, epoch.Add(30*time.Second))
	timeEq(t, "stored LeaseExpiry", e.get(a.ID).LeaseExpiry, epoch.Add(30*time.Second))
	r := e.batch("inst-2", store.Batch{Claim: store.ClaimRequest{Limit: 5, Lease: 5 * time.Minute}})
	sameIDs(t, "claimed", r.Claimed, b)
	timeEq(t, "LeaseExpiry (requested)", r.Claimed[0].LeaseExpiry, epoch.Add(5*time.Minute))
}

func testClaimDestinations(t *testing.T, h Harness) {
	e := newEnv(t, h)
	a, b, c := msg("a", ""), msg("b", ""), msg("c", "")
	e.enqueue(a, b, c)
	r := e.batch("i", store.Batch{Claim: store.ClaimRequest{Limit: 10, Destinations: []string{"a", "c"}}})
	sameIDs(t, "claimed", r.Claimed, a, c)
	r = e.batch("i", store.Batch{Claim: store.ClaimRequest{Limit: 10, Destinations: []string{"zzz"}}})
	sameIDs(t, "claimed", r.Claimed)
	e.claimExactly("i", 10, b)
}

func testClaimExclude(t *testing.T, h Harness) {
	e := newEnv(t, h)
	a, b, c := msg("a", ""), msg("b", ""), msg("c", "")
	e.enqueue(a, b, c)
	r := e.batch("i", store.Batch{Claim: store.ClaimRequest{Limit: 10, ExcludeDestinations: []string{"b"}}})
	sameIDs(t, "claimed", r.Claimed, a, c)
	r = e.batch("i", store.Batch{Claim: store.ClaimRequest{Limit: 10, Destinations: []string{"b"}, ExcludeDestinations: []string{"b"}}})
	sameIDs(t, "claimed (included and excluded)", r.Claimed)
}

func testClaimTogether(t *testing.T, h Harness) {
	for _, o := range []outbox.Ordering{outbox.OrderingStrict, outbox.OrderingRelease} {
		t.Run(string(o), func(t *testing.T) {
			e := newEnv(t, h, withOrdering(o))
			ms := e.enqueue(msgs(3, "d", "s")...)
			e.claimExactly("a", 2, ms[0], ms[1])
			// ms[2] waits behind the leased ones.
			e.claimExactly("b", 10)
		})
	}
}

func testClaimEmptyStream(t *testing.T, h Harness) {
	e := newEnv(t, h)
	ms := e.enqueue(msgs(3, "d", "")...)
	e.claimExactly("a", 1, ms[0])
	e.fail("a", store.Failure{ID: ms[0].ID})
	e.claimExactly("b", 1, ms[1])
	e.claimExactly("c", 1, ms[2])
}

func testClaimStreamScope(t *testing.T, h Harness) {
	e := newEnv(t, h)
	a1, b1, a2 := msg("a", "s"), msg("b", "s"), msg("a", "s")
	e.enqueue(a1, b1, a2)
	e.claimExactly("x", 1, a1)
	e.claimExactly("y", 10, b1)
}

func testClaimPerMessageOrdering(t *testing.T, h Harness) {
	e := newEnv(t, h) // destination default: strict
	m1, m2, m3 := msg("d", "s"), msg("d", "s"), msg("d", "s")
	m1.Ordering = outbox.OrderingRelease
	m2.Ordering = outbox.OrderingNone
	e.enqueue(m1, m2, m3)
	e.claimExactly("a", 1, m1)
	// m1 (release) leased: it holds back m3 but not m2 (none).
	e.claimExactly("b", 10, m2)
	e.fail("a", store.Failure{ID: m1.ID})
	// m1 failed under release: it holds nothing; m2 (none) leased holds nothing.
	e.claimExactly("c", 10, m3)
}

// testClaimPastUnorderedRun: a strict stream whose oldest messages are a
// long run of per-message ordering none (claimed as unordered ones) is
// still served: a claim that reads only such rows moves past them rather
// than taking the stream for empty, and its strict messages are claimed,
// the first no later than the second.
func testClaimPastUnorderedRun(t *testing.T, h Harness) {
	e := newEnv(t, h) // destination default: strict
	loose := msgs(90, "d", "s")
	for _, m := range loose {
		m.Ordering = outbox.OrderingNone
	}
	strict := msgs(2, "d", "s")
	e.enqueue(append(loose, strict...)...)
	claimed := map[uuid.UUID]int{}
	when := map[uuid.UUID]int{}
	for i := range 30 {
		for _, m := range e.claim(fmt.Sprintf("i%d", i), 10) {
			claimed[m.ID]++
			when[m.ID] = i
		}
	}
	for _, m := range loose {
		if claimed[m.ID] != 1 {
			t.Fatalf("an unordered message claimed %d times, want once", claimed[m.ID])
		}
	}
	if claimed[strict[0].ID] != 1 || claimed[strict[1].ID] != 1 {
		t.Fatalf("strict messages claimed %d and %d times, want once each", claimed[strict[0].ID], claimed[strict[1].ID])
	}
	if when[strict[0].ID] > when[strict[1].ID] {
		t.Fatalf("the second strict message was claimed in call %d, before the first (%d)", when[strict[1].ID], when[strict[0].ID])
	}
}

func testClaimPerDestinationPolicy(t *testing.T, h Harness) {
	e := newEnv(t, h, func(c *store.Config) {
		c.Policies = map[string]store.Policy{"loose": {Ordering: outbox.OrderingRelease}}
	})
	l1, l2, s1, s2 := msg("loose", "s"), msg("loose", "s"), msg("strict", "s"), msg("strict", "s")
	e.enqueue(l1, l2, s1, s2)
	e.claimExactly("a", 10, l1, l2, s1, s2)
	e.batch("a", store.Batch{
		Failures:    []store.Failure{{ID: l1.ID, Error: "x"}, {ID: s1.ID, Error: "x"}},
		Completions: []store.Completion{{ID: l2.ID}, {ID: s2.ID}},
	})
	e.claimExactly("b", 10, l2)
}

// testClaimPastManyRetries: under release ordering a message waiting for
// its retry lets the later messages of its stream go on, however many
// such messages wait at the stream's head (more than one read of a stream
// takes: its share of a claim plus a few rows), and each retry is claimed
// when it comes due.
func testClaimPastManyRetries(t *testing.T, h Harness) {
	e := newEnv(t, h, withOrdering(outbox.OrderingRelease))
	const waiting = 40
	retrying := e.enqueue(msgs(waiting, "d", "s")...)
	got := e.claim("a", waiting)
	if len(got) != waiting {
		t.Fatalf("claimed %d of the %d first messages", len(got), waiting)
	}
	fs := make([]store.Failure, waiting)
	for i, m := range retrying {
		fs[i] = store.Failure{ID: m.ID, Error: "x"}
	}
	e.batch("a", store.Batch{Failures: fs})
	later := e.enqueue(msgs(3, "d", "s")...)
	e.claimExactly("b", 10, later...)
	e.complete("b", outbox.StatusPublished, later[0].ID, later[1].ID, later[2].ID)
	e.clk.Advance(time.Minute) // seed 000's first retry
	if got := e.claim("c", 2*waiting); len(got) != waiting {
		t.Fatalf("claimed %d of the %d retries due", len(got), waiting)
	}
}

func testClaimLaterDoesNotHold(t *testing.T, h Harness) {
	e := newEnv(t, h, withOrdering(outbox.OrderingRelease))
	m := e.enqueue(msgs(2, "d", "s")...)
	e.claimExactly("a", 2, m...)
	e.batch("a", store.Batch{
		Failures:    []store.Failure{{ID: m[0].ID, Error: "x"}},
		Completions: []store.Completion{{ID: m[1].ID}},
	})
	r := e.batch("b", store.Batch{Claim: store.ClaimRequest{Limit: 10, Lease: time.Hour}})
	sameIDs(t, "b claimed", r.Claimed, m[1])
	e.clk.Advance(time.Minute)
	// M2 is leased, but it comes after M1: M1's retry is claimable.
	e.claimExactly("c", 10, m[0])
}
