package storetest

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

var releaseCases = []testCase{
	{"ReleaseWithAfterDoesNotChargeAttempts", testReleaseAfter},
	{"ReleaseWithoutAfterOnlyClearsLease", testReleaseNow},
	{"ReleaseFromNonHolderIsStale", testReleaseStale},
}

var leaseCases = []testCase{
	{"ExpiredLeaseIsReclaimableByAnotherInstance", testLeaseExpiry},
	{"RenewExtendsLease", testRenew},
	{"RenewByNonHolderIsStale", testRenewStale},
	{"RenewAfterReclaimByAnotherIsStale", testRenewAfterReclaim},
	{"RenewOfExpiredButNotReclaimedLeaseSucceeds", testRenewExpired},
	{"CompletionIsAppliedWhoeverHoldsTheLease", testCompletionAnyHolder},
	{"StatusZeroCompletionClearsLeaseOnly", testStatusZero},
}

func testReleaseAfter(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.enqueue(msg("d", ""))[0]
	e.claimExactly("a", 1, m)
	r := e.batch("a", store.Batch{Releases: []store.Release{{
		ID: m.ID, After: 2 * time.Minute, Error: "503 from destination", CompletedStatus: outbox.StatusEventStored,
	}}})
	eq(t, "len(Stale)", len(r.Stale), 0)
	got := e.get(m.ID)
	eq(t, "Attempts", got.Attempts, 0)
	eq(t, "Status", got.Status, outbox.StatusStored|outbox.StatusEventStored)
	eq(t, "Error", got.Error, "503 from destination")
	eq(t, "InstanceID", got.InstanceID, "")
	timeEq(t, "ScheduledFor", got.ScheduledFor, epoch.Add(2*time.Minute))
	e.claimExactly("b", 1)
	e.clk.Advance(2 * time.Minute)
	got = e.claimExactly("b", 1, m)[0]
	eq(t, "Attempts on reclaim", got.Attempts, 0)
}

func testReleaseNow(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.enqueue(msg("d", ""))[0]
	e.claimExactly("a", 1, m)
	e.batch("a", store.Batch{Releases: []store.Release{{ID: m.ID}}})
	got := e.get(m.ID)
	eq(t, "Attempts", got.Attempts, 0)
	eq(t, "Status", got.Status, outbox.StatusStored)
	eq(t, "Error", got.Error, "")
	if !got.ScheduledFor.IsZero() {
		t.Fatalf("ScheduledFor = %v, want zero", got.ScheduledFor)
	}
	e.claimExactly("b", 1, m)
}

func testReleaseStale(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.enqueue(msg("d", ""))[0]
	e.claimExactly("a", 1, m)
	r := e.batch("b", store.Batch{Releases: []store.Release{{ID: m.ID, After: time.Hour}}})
	sameUUIDs(t, "Stale", r.Stale, m.ID)
	got := e.get(m.ID)
	eq(t, "InstanceID", got.InstanceID, "a")
	if !got.ScheduledFor.IsZero() {
		t.Fatalf("stale release scheduled the message for %v", got.ScheduledFor)
	}
}

func testLeaseExpiry(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.enqueue(msgs(2, "d", "s")...)
	e.claimExactly("a", 1, m[0])
	e.claimExactly("b", 10)
	e.clk.Advance(30*time.Second - time.Millisecond)
	e.claimExactly("b", 10)
	e.clk.Advance(time.Millisecond)
	// The expired lease no longer holds: b takes both, in order.
	got := e.claimExactly("b", 10, m...)
	eq(t, "InstanceID", got[0].InstanceID, "b")
	r := e.fail("a", store.Failure{ID: m[0].ID})
	sameUUIDs(t, "Stale", r.Stale, m[0].ID)
	eq(t, "Attempts", e.get(m[0].ID).Attempts, 0)
	e.complete("a", outbox.StatusPublished, m[0].ID)
	e.mustBeGone(m[0].ID)
}

func testRenew(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.enqueue(msg("d", ""))[0]
	e.claimExactly("a", 1, m)
	e.clk.Advance(20 * time.Second)
	r := e.batch("a", store.Batch{RenewLeases: []uuid.UUID{m.ID}})
	eq(t, "len(Stale)", len(r.Stale), 0)
	got := e.get(m.ID)
	timeEq(t, "LeaseExpiry", got.LeaseExpiry, epoch.Add(50*time.Second))
	eq(t, "InstanceID", got.InstanceID, "a")
	e.clk.Advance(20 * time.Second) // past the original expiry
	e.claimExactly("b", 1)
	e.clk.Advance(10 * time.Second)
	e.claimExactly("b", 1, m)
}

func testRenewStale(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.enqueue(msg("d", ""))[0]
	e.claimExactly("a", 1, m)
	e.clk.Advance(10 * time.Second)
	r := e.batch("b", store.Batch{RenewLeases: []uuid.UUID{m.ID, uuid.New()}})
	eq(t, "len(Stale)", len(r.Stale), 2)
	timeEq(t, "LeaseExpiry", e.get(m.ID).LeaseExpiry, epoch.Add(30*time.Second))
}

func testRenewAfterReclaim(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.enqueue(msg("d", ""))[0]
	e.claimExactly("a", 1, m)
	e.clk.Advance(31 * time.Second)
	e.claimExactly("b", 1, m)
	r := e.batch("a", store.Batch{RenewLeases: []uuid.UUID{m.ID}})
	sameUUIDs(t, "Stale", r.Stale, m.ID)
	eq(t, "InstanceID", e.get(m.ID).InstanceID, "b")
}

func testRenewExpired(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.enqueue(msg("d", ""))[0]
	e.claimExactly("a", 1, m)
	e.clk.Advance(31 * time.Second)
	r := e.batch("a", store.Batch{RenewLeases: []uuid.UUID{m.ID}})
	eq(t, "len(Stale)", len(r.Stale), 0)
	timeEq(t, "LeaseExpiry", e.get(m.ID).LeaseExpiry, epoch.Add(61*time.Second))
	e.claimExactly("b", 1)
}

func testCompletionAnyHolder(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.enqueue(msgs(2, "d", "s")...)
	e.claimExactly("a", 1, m[0])
	r := e.batch("b", store.Batch{
		Completions: []store.Completion{{ID: m[0].ID, Status: outbox.StatusPublished}, {ID: uuid.New(), Status: outbox.StatusPublished}},
		Claim:       store.ClaimRequest{Limit: 10},
	})
	e.mustBeGone(m[0].ID)
	sameIDs(t, "claimed after completion in the same batch", r.Claimed, m[1])
}

func testStatusZero(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.enqueue(msg("d", ""))[0]
	e.claimExactly("a", 1, m)
	e.complete("a", 0, m.ID)
	got := e.get(m.ID)
	eq(t, "Status", got.Status, outbox.StatusStored)
	eq(t, "Attempts", got.Attempts, 0)
	eq(t, "InstanceID", got.InstanceID, "")
	if !got.LeaseExpiry.IsZero() {
		t.Fatalf("LeaseExpiry = %v, want zero", got.LeaseExpiry)
	}
	e.claimExactly("b", 1, m)
}
