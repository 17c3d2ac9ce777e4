package storetest

import (
	"testing"
	"time"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// gaugesCases run against stores that implement store.Gauger; others skip
// them.
var gaugesCases = []testCase{
	{"EmptyStoreIsZero", testGaugesEmpty},
	{"AgreeWithMonitoringQueries", testGaugesAgree},
}

// gauger returns e's store as a store.Gauger, or skips the test.
func (e *env) gauger() store.Gauger {
	e.t.Helper()
	g, ok := e.s.(store.Gauger)
	if !ok {
		e.t.Skip("the store does not implement store.Gauger")
	}
	return g
}

func (e *env) gauges(minAttempts int) store.Gauges {
	e.t.Helper()
	g, err := e.gauger().Gauges(e.ctx, minAttempts)
	noErr(e.t, "Gauges", err)
	return g
}

func testGaugesEmpty(t *testing.T, h Harness) {
	e := newEnv(t, h)
	got := e.gauges(1)
	if got != (store.Gauges{}) {
		t.Fatalf("Gauges of an empty store = %+v, want all zero", got)
	}
}

// claimFrom claims up to n messages of destination d as instance "g".
func (e *env) claimFrom(d string, n int) []*outbox.Message {
	e.t.Helper()
	return e.batch("g", store.Batch{Claim: store.ClaimRequest{Limit: n, Destinations: []string{d}}}).Claimed
}

// testGaugesAgree builds a few of everything the gauges count, and of what
// they must leave out, and checks each gauge against the query that
// defines it: DLQ().Count, the oldest pending entry of DLQ().List,
// ScheduledBacklog, PoisonCandidates, BlockedStreams, and the leased
// listing's definition.
func testGaugesAgree(t *testing.T, h Harness) {
	e := newEnv(t, h, withMaxAttempts(10))
	e.gauger()

	// A dead letter that is resolved: not pending, not the oldest.
	resolved := e.enqueue(msg("resolved", ""))[0]
	sameIDs(t, "claimed", e.claimFrom("resolved", 1), resolved)
	e.fail("g", store.Failure{ID: resolved.ID, Permanent: true, Error: "bad"})
	es, err := e.s.DLQ().List(e.ctx, &dlq.Filters{Destination: "resolved"})
	noErr(t, "List", err)
	eq(t, "entries of resolved", len(es), 1)
	noErr(t, "Resolve", e.s.DLQ().Resolve(e.ctx, es[0].ID, "dealt with"))

	// A pending dead letter holding a strict stream: blocked.
	e.clk.Advance(time.Minute)
	dead := e.enqueue(msgs(2, "dead", "s")...)
	sameIDs(t, "claimed", e.claimFrom("dead", 1), dead[0])
	e.fail("g", store.Failure{ID: dead[0].ID, Permanent: true, Error: "bad"})

	// A message dead-lettered by hand holding a strict stream: pending,
	// blocked.
	hand := e.enqueue(msgs(2, "hand", "s")...)
	noErr(t, "DeadLetter", e.s.DeadLetter(e.ctx, hand[0].ID, "by hand"))
	// A message dead-lettered and replayed: back in its stream, which it
	// no longer blocks (its entry is replayed, not pending).
	replayed := e.enqueue(msgs(2, "replayed", "s")...)
	noErr(t, "DeadLetter", e.s.DeadLetter(e.ctx, replayed[0].ID, "by hand"))
	es, err = e.s.DLQ().List(e.ctx, &dlq.Filters{Destination: "replayed"})
	noErr(t, "List", err)
	eq(t, "entries of replayed", len(es), 1)
	noErr(t, "Replay", e.s.DLQ().Replay(e.ctx, es[0].ID))

	// A strict stream whose head failed three times and waits: scheduled,
	// a poison candidate from 3 attempts, blocked.
	poison := e.enqueue(msgs(2, "poison", "s")...)
	for i := range 3 {
		if i > 0 {
			e.clk.Advance(2 * time.Hour)
		}
		sameIDs(t, "claimed", e.claimFrom("poison", 1), poison[0])
		e.fail("g", store.Failure{ID: poison[0].ID, Error: "boom"})
	}
	// An unordered message that failed once: scheduled, a candidate from
	// 1 attempt, blocking nothing.
	retrying := e.enqueue(msg("retry", ""))[0]
	sameIDs(t, "claimed", e.claimFrom("retry", 1), retrying)
	e.fail("g", store.Failure{ID: retrying.ID, Error: "boom"})
	// A message enqueued for later: scheduled, never failed.
	future := msg("future", "")
	future.ScheduledFor = epoch.Add(100 * time.Hour)
	e.enqueue(future)
	// A lease that lapsed: not leased.
	lapsed := e.enqueue(msg("lapsed", ""))[0]
	sameIDs(t, "claimed", e.claimFrom("lapsed", 1), lapsed)
	e.clk.Advance(e.cfg.LeaseDuration)
	// Two messages in flight: leased.
	leased := e.enqueue(msgs(2, "leased", "")...)
	sameIDs(t, "claimed", e.claimFrom("leased", 2), leased...)
	// A delivered message kept for retention: counted nowhere.
	done := e.enqueue(msg("done", ""))[0]
	sameIDs(t, "claimed", e.claimFrom("done", 1), done)
	e.complete("g", outbox.StatusPublished, done.ID)

	g := e.gauges(3)
	eq(t, "DLQPending", g.DLQPending, 2)
	eq(t, "Scheduled", g.Scheduled, 3)
	eq(t, "PoisonCandidates(3)", g.PoisonCandidates, 1)
	eq(t, "BlockedStreams", g.BlockedStreams, 3)
	eq(t, "Leased", g.Leased, 2)
	e.gaugesAgree(3)
	e.gaugesAgree(1)

	// Once every wait is over and the leases lapsed, only the dead letters
	// still hold their streams.
	e.clk.Advance(200 * time.Hour)
	g = e.gauges(1)
	eq(t, "Scheduled once all is due", g.Scheduled, 0)
	eq(t, "BlockedStreams once all is due", g.BlockedStreams, 2)
	eq(t, "Leased once the leases lapsed", g.Leased, 0)
	eq(t, "PoisonCandidates(1) once all is due", g.PoisonCandidates, 2)
	e.gaugesAgree(1)

	// Resolving the pending entries empties the queue's gauges; the
	// resolved messages still hold their streams.
	es, err = e.s.DLQ().List(e.ctx, &dlq.Filters{Status: dlq.StatusPending})
	noErr(t, "List", err)
	eq(t, "pending entries", len(es), 2)
	for _, en := range es {
		noErr(t, "Resolve", e.s.DLQ().Resolve(e.ctx, en.ID, "dealt with"))
	}
	g = e.gauges(1)
	eq(t, "DLQPending once resolved", g.DLQPending, 0)
	timeEq(t, "OldestDLQ once resolved", g.OldestDLQ, time.Time{})
	eq(t, "BlockedStreams once resolved", g.BlockedStreams, 2)
	e.gaugesAgree(1)
}

// gaugesAgree checks Gauges(minAttempts) against the queries that define
// each gauge.
func (e *env) gaugesAgree(minAttempts int) {
	t := e.t
	t.Helper()
	g := e.gauges(minAttempts)
	depth, err := e.s.DLQ().Count(e.ctx)
	noErr(t, "DLQ().Count", err)
	eq(t, "DLQPending vs DLQ().Count", g.DLQPending, depth)
	es, err := e.s.DLQ().List(e.ctx, &dlq.Filters{Status: dlq.StatusPending, Limit: 1})
	noErr(t, "DLQ().List", err)
	var oldest time.Time
	if len(es) > 0 {
		oldest = es[0].FailureTime
	}
	timeEq(t, "OldestDLQ vs the first pending entry", g.OldestDLQ, oldest)
	b, err := e.s.ScheduledBacklog(e.ctx)
	noErr(t, "ScheduledBacklog", err)
	eq(t, "Scheduled vs ScheduledBacklog", g.Scheduled, b.Count)
	ps, err := e.s.PoisonCandidates(e.ctx, minAttempts)
	noErr(t, "PoisonCandidates", err)
	eq(t, "PoisonCandidates vs len(PoisonCandidates)", min(g.PoisonCandidates, store.MaxPoisonCandidates), len(ps))
	blocked, err := e.s.BlockedStreams(e.ctx)
	noErr(t, "BlockedStreams", err)
	eq(t, "BlockedStreams vs BlockedStreams", g.BlockedStreams, blocked)
	if a, ok := e.s.(store.Admin); ok {
		ms, err := a.ListMessages(e.ctx, store.MessageFilter{State: store.StateLeased, Limit: 1000})
		noErr(t, "ListMessages(leased)", err)
		eq(t, "Leased vs ListMessages(leased)", g.Leased, len(ms))
	}
}
