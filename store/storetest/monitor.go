package storetest

import (
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/retry"
	"github.com/backstophq/backstop/store"
)

var monitoringCases = []testCase{
	{"RetryDistributionCountsFailedByAttempts", testRetryDistribution},
	{"FailureReasonsCountsByReason", testFailureReasons},
	{"ScheduledBacklogNextAndLatest", testBacklog},
	{"PoisonCandidatesByMinAttempts", testPoisonCandidates},
	{"StreamStatusExplainsWhy", testStreamStatus},
	{"BlockedStreamsCountsHeldStrictStreams", testBlockedStreams},
}

// testBlockedStreams: a strict stream is blocked while a failed message
// waits for its retry or sits in the dead-letter queue with later messages
// behind it; a release-mode stream, a stream with nothing behind its
// failure, and a released stream are not.
func testBlockedStreams(t *testing.T, h Harness) {
	e := newEnv(t, h, func(c *store.Config) {
		c.Policies = map[string]store.Policy{"rel": {Strategy: retry.DurableBackoff(), MaxAttempts: 5, Ordering: outbox.OrderingRelease}}
	})
	count := func(what string, want int) {
		t.Helper()
		n, err := e.s.BlockedStreams(e.ctx)
		noErr(t, "BlockedStreams", err)
		eq(t, what, n, want)
	}
	count("nothing enqueued", 0)
	waiting := e.enqueue(msgs(3, "d", "waiting")...)
	dead := e.enqueue(msgs(2, "d", "dead")...)
	alone := e.enqueue(msg("d", "alone"))
	rel := e.enqueue(msgs(2, "rel", "r")...)
	e.claimExactly("i", 1, waiting[0])
	e.fail("i", store.Failure{ID: waiting[0].ID, Error: "x"})
	e.deadLetter("i", dead[0])
	e.claimExactly("i", 1, alone[0])
	e.fail("i", store.Failure{ID: alone[0].ID, Error: "x"})
	r := e.batch("i", store.Batch{Claim: store.ClaimRequest{Limit: 1, Destinations: []string{"rel"}}})
	sameIDs(t, "claimed", r.Claimed, rel[0])
	e.fail("i", store.Failure{ID: rel[0].ID, Error: "x"})
	count("a waiting and a dead-lettered strict stream", 2)

	_, err := e.s.ReleaseStream(e.ctx, "d", "dead")
	noErr(t, "ReleaseStream", err)
	count("after releasing the dead-lettered stream", 1)
	e.clk.Advance(2 * time.Minute) // the retry is due: nothing waits any more
	count("once the retry is due", 0)
}

// failTimes fails m n times, advancing the clock past each retry.
func (e *env) failTimes(m *outbox.Message, n int, reason errorhandling.FailureReason, text string) {
	e.t.Helper()
	for i := range n {
		if i > 0 {
			e.clk.Advance(2 * time.Hour)
		}
		r := e.batch("mon", store.Batch{Claim: store.ClaimRequest{Limit: 1, Destinations: []string{m.Destination}}})
		sameIDs(e.t, "claimed", r.Claimed, m)
		e.fail("mon", store.Failure{ID: m.ID, Reason: reason, Error: text})
	}
}

func testRetryDistribution(t *testing.T, h Harness) {
	e := newEnv(t, h, withMaxAttempts(10))
	got, err := e.s.RetryDistribution(e.ctx)
	noErr(t, "RetryDistribution", err)
	eq(t, "rows when nothing failed", len(got), 0)
	a, b, c := msg("a", ""), msg("b", ""), msg("c", "")
	e.enqueue(a, b, c, msg("ok", ""))
	e.failTimes(a, 1, errorhandling.ReasonTransportUnavailable, "x")
	e.failTimes(b, 1, errorhandling.ReasonTransportUnavailable, "x")
	e.failTimes(c, 3, errorhandling.ReasonTransportUnavailable, "x")
	got, err = e.s.RetryDistribution(e.ctx)
	noErr(t, "RetryDistribution", err)
	want := []store.AttemptsCount{{Attempts: 1, Count: 2}, {Attempts: 3, Count: 1}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("RetryDistribution = %+v, want %+v", got, want)
	}
}

func testFailureReasons(t *testing.T, h Harness) {
	e := newEnv(t, h)
	var ms []*outbox.Message
	for range 5 {
		ms = append(ms, msg("d", ""))
	}
	e.enqueue(ms...)
	e.claimExactly("i", 5, ms...)
	e.batch("i", store.Batch{Failures: []store.Failure{
		{ID: ms[0].ID, Error: "x", Reason: errorhandling.ReasonTimeoutExceeded},
		{ID: ms[1].ID, Error: "x", Reason: errorhandling.ReasonTransportUnavailable},
		{ID: ms[2].ID, Error: "x", Reason: errorhandling.ReasonTransportUnavailable},
		{ID: ms[3].ID, Error: "x"},
	}})
	got, err := e.s.FailureReasons(e.ctx)
	noErr(t, "FailureReasons", err)
	if len(got) != 3 || got[0] != (store.ReasonCount{Reason: errorhandling.ReasonTransportUnavailable, Count: 2}) {
		t.Fatalf("FailureReasons = %+v, want TransportUnavailable:2 first of 3", got)
	}
	counts := map[errorhandling.FailureReason]int{}
	for _, rc := range got {
		counts[rc.Reason] = rc.Count
	}
	eq(t, "TimeoutExceeded", counts[errorhandling.ReasonTimeoutExceeded], 1)
	eq(t, "Unknown", counts[errorhandling.ReasonUnknown], 1)
}

func testBacklog(t *testing.T, h Harness) {
	e := newEnv(t, h, withOrdering(outbox.OrderingNone), withStrategy(constant(time.Minute)))
	b, err := e.s.ScheduledBacklog(e.ctx)
	noErr(t, "ScheduledBacklog", err)
	eq(t, "empty Count", b.Count, 0)
	a, c := msg("d", ""), msg("d", "")
	future := msg("d", "")
	future.ScheduledFor = epoch.Add(3 * time.Hour)
	e.enqueue(a, c, future)
	e.claimExactly("i", 2, a, c)
	e.fail("i", store.Failure{ID: a.ID, RetryAfter: 10 * time.Minute})
	e.fail("i", store.Failure{ID: c.ID, RetryAfter: 20 * time.Minute})
	b, err = e.s.ScheduledBacklog(e.ctx)
	noErr(t, "ScheduledBacklog", err)
	eq(t, "Count", b.Count, 3)
	timeEq(t, "Next", b.Next, epoch.Add(10*time.Minute))
	timeEq(t, "Latest", b.Latest, epoch.Add(3*time.Hour))
	e.clk.Advance(15 * time.Minute)
	b, err = e.s.ScheduledBacklog(e.ctx)
	noErr(t, "ScheduledBacklog", err)
	eq(t, "Count once one is due", b.Count, 2)
	timeEq(t, "Next once one is due", b.Next, epoch.Add(20*time.Minute))
}

func testPoisonCandidates(t *testing.T, h Harness) {
	e := newEnv(t, h, withMaxAttempts(20))
	a, b, c := msg("a", ""), msg("b", ""), msg("c", "")
	e.enqueue(a, b, c)
	e.failTimes(a, 2, errorhandling.ReasonSerializationError, "bad")
	e.failTimes(b, 4, errorhandling.ReasonSerializationError, "bad")
	e.failTimes(c, 3, errorhandling.ReasonSerializationError, "bad")
	got, err := e.s.PoisonCandidates(e.ctx, 3)
	noErr(t, "PoisonCandidates", err)
	sameIDs(t, "PoisonCandidates(3)", got, b, c)
	eq(t, "first Attempts", got[0].Attempts, 4)
	got, err = e.s.PoisonCandidates(e.ctx, 10)
	noErr(t, "PoisonCandidates(10)", err)
	eq(t, "PoisonCandidates(10)", len(got), 0)

	// At most MaxPoisonCandidates are listed, with their payloads; the
	// gauge counts them all. A retry backlog of 33,000 was read and sent
	// whole by every stats request.
	many := msgs(store.MaxPoisonCandidates+5, "many", "")
	e.enqueue(many...)
	claimed := e.batch("mon", store.Batch{Claim: store.ClaimRequest{Limit: len(many), Destinations: []string{"many"}}}).Claimed
	eq(t, "claimed", len(claimed), len(many))
	fs := make([]store.Failure, len(claimed))
	for i, m := range claimed {
		fs[i] = store.Failure{ID: m.ID, Reason: errorhandling.ReasonTimeoutExceeded, Error: "slow"}
	}
	e.batch("mon", store.Batch{Failures: fs})
	got, err = e.s.PoisonCandidates(e.ctx, 1)
	noErr(t, "PoisonCandidates(1)", err)
	eq(t, "PoisonCandidates(1) past the bound", len(got), store.MaxPoisonCandidates)
	eq(t, "the first, most attempts first", got[0].ID, b.ID)
	if g, ok := e.s.(store.Gauger); ok {
		gs, err := g.Gauges(e.ctx, 1)
		noErr(t, "Gauges", err)
		eq(t, "the gauge counts them all", gs.PoisonCandidates, len(many)+3)
	}
}

func testStreamStatus(t *testing.T, h Harness) {
	e := newEnv(t, h)
	st, err := e.s.StreamStatus(e.ctx, "d", "s")
	noErr(t, "StreamStatus(empty)", err)
	if st.Head != nil || st.Blocked || st.Pending != 0 || st.Why == "" {
		t.Fatalf("empty stream status = %+v", st)
	}
	m := e.enqueue(msgs(4, "d", "s")...)
	st, err = e.s.StreamStatus(e.ctx, "d", "s")
	noErr(t, "StreamStatus", err)
	eq(t, "Pending", st.Pending, 4)
	eq(t, "Blocked while due", st.Blocked, false)
	eq(t, "Head", st.Head.ID, m[0].ID)

	e.claimExactly("i", 1, m[0])
	e.fail("i", store.Failure{ID: m[0].ID, Reason: errorhandling.ReasonTransportUnavailable, Error: "connection refused"})
	st, err = e.s.StreamStatus(e.ctx, "d", "s")
	noErr(t, "StreamStatus", err)
	eq(t, "Destination", st.Destination, "d")
	eq(t, "Stream", st.Stream, "s")
	eq(t, "Head", st.Head.ID, m[0].ID)
	eq(t, "Blocked", st.Blocked, true)
	eq(t, "Pending", st.Pending, 4)
	for _, want := range []string{m[0].ID.String(), "TransportUnavailable", "connection refused", "3 later"} {
		if !strings.Contains(st.Why, want) {
			t.Fatalf("Why = %q, want it to mention %q", st.Why, want)
		}
	}

	e.clk.Advance(time.Minute)
	e.claimExactly("i", 1, m[0])
	e.fail("i", store.Failure{ID: m[0].ID, Permanent: true, Reason: errorhandling.ReasonValidationFailure, Error: "schema"})
	st, err = e.s.StreamStatus(e.ctx, "d", "s")
	noErr(t, "StreamStatus", err)
	eq(t, "Head (dead-lettered)", st.Head.ID, m[0].ID)
	eq(t, "Blocked (dead-lettered)", st.Blocked, true)
	eq(t, "Pending (dead letter not counted)", st.Pending, 3)
	for _, want := range []string{"dead-lettered", "ValidationFailure", "schema"} {
		if !strings.Contains(st.Why, want) {
			t.Fatalf("Why = %q, want it to mention %q", st.Why, want)
		}
	}

	_, err = e.s.ReleaseStream(e.ctx, "d", "s")
	noErr(t, "ReleaseStream", err)
	st, err = e.s.StreamStatus(e.ctx, "d", "s")
	noErr(t, "StreamStatus", err)
	eq(t, "Head after release", st.Head.ID, m[1].ID)
	eq(t, "Blocked after release", st.Blocked, false)
	if st.Why == "" {
		t.Fatal("Why is empty")
	}
}
