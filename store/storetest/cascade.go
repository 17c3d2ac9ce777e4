package storetest

import (
	"testing"
	"time"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// The cascade decision matrix of seed 000, read with the ordering modes of
// store.go, and the integration tests the seed names.
var cascadeCases = []testCase{
	{"Matrix1_FailedScheduled_NotReleased_Blocked", testMatrix1},
	{"Matrix2_FailedScheduled_Released_Claimable", testMatrix2},
	{"Matrix2_StrictKeepsReleasedMessagesBehindWaitingHead", testMatrix2Strict},
	{"Matrix3_DeadLettered_StrictBlockedUntilReleaseStream", testMatrix3Strict},
	{"Matrix3_DeadLettered_ReleaseClaimable", testMatrix3Release},
	{"Matrix4_ActiveLease_BlocksInEveryModeButNone", testMatrix4},
	{"Matrix5_Completed_Claimable", testMatrix5},
	{"FailsOutboxMessages_MarksAsFailedWithError", testFailsMarksFailed},
	{"StreamBasedFailureCascade_ReleasesLaterMessages", testMatrix2},
	{"ScheduledRetry_BlocksLaterMessagesInStream", testScheduledRetryBlocks},
	{"ScheduledRetryExpires_UnblocksStream", testScheduledRetryExpires},
	{"StrictReleaseWithAfterHoldsStream", testReleaseAfterHoldsStrict},
}

// Row 1: M1 failed and scheduled, M2 not released: M2 is blocked (strict),
// and under release it stays with the instance that leased it.
func testMatrix1(t *testing.T, h Harness) {
	t.Run("strict", func(t *testing.T) {
		e := newEnv(t, h)
		m := e.enqueue(msgs(2, "d", "s")...)
		e.claimExactly("a", 1, m[0])
		e.fail("a", store.Failure{ID: m[0].ID})
		e.claimExactly("b", 10)
	})
	t.Run("release", func(t *testing.T) {
		e := newEnv(t, h, withOrdering(outbox.OrderingRelease))
		m := e.enqueue(msgs(2, "d", "s")...)
		e.claimExactly("a", 2, m[0], m[1])
		e.fail("a", store.Failure{ID: m[0].ID})
		e.claimExactly("b", 10) // M2 still leased by a
	})
}

// Row 2 and seed 000's StreamBasedFailureCascade: instance claims M1, M2,
// M3; M1 fails, M2 and M3 are completed with Status=0; under release the
// next claim returns M2, M3 while M1 waits for its retry.
func testMatrix2(t *testing.T, h Harness) {
	e := newEnv(t, h, withOrdering(outbox.OrderingRelease))
	m := e.enqueue(msgs(3, "d", "s")...)
	e.claimExactly("a", 10, m...)
	e.batch("a", store.Batch{
		Failures:    []store.Failure{{ID: m[0].ID, CompletedStatus: outbox.StatusStored, Error: "Processing failed"}},
		Completions: []store.Completion{{ID: m[1].ID, Status: 0}, {ID: m[2].ID, Status: 0}},
	})
	for _, r := range m[1:] {
		got := e.get(r.ID)
		eq(t, "released Status", got.Status, outbox.StatusStored)
		eq(t, "released InstanceID", got.InstanceID, "")
		if !got.LeaseExpiry.IsZero() {
			t.Fatalf("released message keeps lease %v", got.LeaseExpiry)
		}
	}
	e.claimExactly("b", 10, m[1], m[2])
	e.complete("b", outbox.StatusPublished, m[1].ID, m[2].ID)
	e.mustBeGone(m[1].ID)
	got := e.get(m[0].ID)
	eq(t, "M1 Status", got.Status, outbox.StatusStored|outbox.StatusFailed)
	timeEq(t, "M1 ScheduledFor", got.ScheduledFor, epoch.Add(time.Minute))
}

func testMatrix2Strict(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.enqueue(msgs(3, "d", "s")...)
	e.claimExactly("a", 10, m...)
	e.batch("a", store.Batch{
		Failures:    []store.Failure{{ID: m[0].ID, Error: "Processing failed"}},
		Completions: []store.Completion{{ID: m[1].ID}, {ID: m[2].ID}},
	})
	e.claimExactly("b", 10)
	e.clk.Advance(time.Minute)
	e.claimExactly("b", 10, m...)
}

func testMatrix3Strict(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.enqueue(msgs(3, "d", "s")...)
	e.deadLetter("a", m[0])
	e.claimExactly("b", 10)
	e.clk.Advance(24 * time.Hour)
	e.claimExactly("b", 10)
	n, err := e.s.ReleaseStream(e.ctx, "d", "s")
	noErr(t, "ReleaseStream", err)
	eq(t, "released", n, 1)
	e.claimExactly("b", 10, m[1], m[2])
	n, err = e.s.ReleaseStream(e.ctx, "d", "s")
	noErr(t, "ReleaseStream again", err)
	eq(t, "released again", n, 0)
}

func testMatrix3Release(t *testing.T, h Harness) {
	e := newEnv(t, h, withOrdering(outbox.OrderingRelease))
	m := e.enqueue(msgs(2, "d", "s")...)
	e.deadLetter("a", m[0])
	e.claimExactly("b", 10, m[1])
}

func testMatrix4(t *testing.T, h Harness) {
	for _, tc := range []struct {
		o       outbox.Ordering
		blocked bool
	}{{outbox.OrderingStrict, true}, {outbox.OrderingRelease, true}, {outbox.OrderingNone, false}} {
		t.Run(string(tc.o), func(t *testing.T) {
			e := newEnv(t, h, withOrdering(tc.o))
			m := e.enqueue(msgs(2, "d", "s")...)
			e.claimExactly("a", 1, m[0])
			if tc.blocked {
				e.claimExactly("b", 10)
			} else {
				e.claimExactly("b", 10, m[1])
			}
		})
	}
}

func testMatrix5(t *testing.T, h Harness) {
	for _, retention := range []time.Duration{0, time.Hour} {
		for _, o := range []outbox.Ordering{outbox.OrderingStrict, outbox.OrderingRelease, outbox.OrderingNone} {
			t.Run(string(o)+"/retention="+retention.String(), func(t *testing.T) {
				e := newEnv(t, h, withOrdering(o), func(c *store.Config) { c.Retention = retention })
				m := e.enqueue(msgs(2, "d", "s")...)
				e.claimExactly("a", 1, m[0])
				e.complete("a", outbox.StatusPublished, m[0].ID)
				e.claimExactly("b", 10, m[1])
			})
		}
	}
}

func testFailsMarksFailed(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.enqueue(msg("d", "s"))[0]
	e.claimExactly("a", 1, m)
	r := e.fail("a", store.Failure{
		ID:              m.ID,
		CompletedStatus: outbox.StatusStored,
		Error:           "Network timeout",
		Reason:          errorhandling.ReasonTransportUnavailable,
		Fingerprint:     "fp-1",
	})
	eq(t, "len(Stale)", len(r.Stale), 0)
	eq(t, "len(DeadLettered)", len(r.DeadLettered), 0)
	got := e.get(m.ID)
	eq(t, "Status", int32(got.Status), 32769)
	eq(t, "Attempts", got.Attempts, 1)
	eq(t, "Error", got.Error, "Network timeout")
	eq(t, "FailureReason", got.FailureReason, errorhandling.ReasonTransportUnavailable)
	eq(t, "Fingerprint", got.Fingerprint, "fp-1")
	timeEq(t, "ScheduledFor", got.ScheduledFor, epoch.Add(60*time.Second))
	eq(t, "InstanceID", got.InstanceID, "")
	if !got.LeaseExpiry.IsZero() || !got.DeadLetteredAt.IsZero() {
		t.Fatalf("LeaseExpiry %v DeadLetteredAt %v, want zero", got.LeaseExpiry, got.DeadLetteredAt)
	}
	// second failure: attempts 2, now + 2 minutes.
	e.clk.Advance(time.Minute)
	e.claimExactly("a", 1, m)
	e.fail("a", store.Failure{ID: m.ID, Error: "Network timeout again"})
	got = e.get(m.ID)
	eq(t, "Attempts", got.Attempts, 2)
	eq(t, "FailureReason (unset)", got.FailureReason, errorhandling.ReasonUnknown)
	timeEq(t, "ScheduledFor", got.ScheduledFor, epoch.Add(3*time.Minute))
}

func testScheduledRetryBlocks(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.enqueue(msgs(3, "d", "s")...)
	other := e.enqueue(msg("d", "other"))[0]
	e.claimExactly("a", 1, m[0])
	e.fail("a", store.Failure{ID: m[0].ID})
	e.claimExactly("b", 10, other)
	e.complete("b", outbox.StatusPublished, other.ID)
	e.clk.Advance(time.Minute - time.Millisecond)
	e.claimExactly("b", 10)
}

func testScheduledRetryExpires(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.enqueue(msgs(3, "d", "s")...)
	e.claimExactly("a", 1, m[0])
	e.fail("a", store.Failure{ID: m[0].ID})
	e.claimExactly("b", 10)
	e.clk.Advance(time.Minute)
	got := e.claimExactly("b", 10, m...)
	eq(t, "retried Attempts", got[0].Attempts, 1)
}

func testReleaseAfterHoldsStrict(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.enqueue(msgs(2, "d", "s")...)
	e.claimExactly("a", 1, m[0])
	e.batch("a", store.Batch{Releases: []store.Release{{ID: m[0].ID, After: 2 * time.Minute}}})
	e.claimExactly("b", 10)
	e.clk.Advance(2 * time.Minute)
	e.claimExactly("b", 10, m...)
}
