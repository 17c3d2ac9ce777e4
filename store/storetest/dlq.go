package storetest

import (
	"testing"
	"time"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

var dlqCases = []testCase{
	{"ReplayUnderStrictPutsMessageBackInItsPlace", testReplayStrict},
	{"ReplayAfterReleaseStreamDeliversTheMessage", testReplayAfterRelease},
	{"ReplayMatchingDryRunChangesNothing", testReplayMatching},
	{"ResolveWithNotes", testResolve},
	{"DeleteEntryGivesUpMessageAndFreesStream", testDeleteEntry},
	{"PurgeAndPurgeBeforeCount", testPurge},
	{"AddManualWorkflowEntry", testAddManual},
	{"ListFiltersAndCursorPagination", testListFilters},
}

func testReplayStrict(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.enqueue(msgs(3, "d", "s")...)
	e.deadLetter("a", m[0])
	e.claimExactly("b", 10) // M2, M3 wait behind the dead letter
	ent := onlyEntry(t, e, nil)
	e.clk.Advance(time.Hour)
	noErr(t, "Replay", e.s.DLQ().Replay(e.ctx, ent.ID))
	got := e.get(m[0].ID)
	eq(t, "Attempts", got.Attempts, 0)
	eq(t, "Status", got.Status, outbox.StatusStored)
	eq(t, "Error", got.Error, "")
	if !got.DeadLetteredAt.IsZero() || !got.ScheduledFor.IsZero() {
		t.Fatalf("replayed message: DeadLetteredAt %v ScheduledFor %v, want zero", got.DeadLetteredAt, got.ScheduledFor)
	}
	ent2, err := e.s.DLQ().Get(e.ctx, ent.ID)
	noErr(t, "Get", err)
	eq(t, "Replayed", ent2.Replayed, true)
	if ent2.ReplayedAt == nil || !ent2.ReplayedAt.Equal(e.clk.Now()) {
		t.Fatalf("ReplayedAt = %v, want %v", ent2.ReplayedAt, e.clk.Now())
	}
	isErr(t, "second Replay", e.s.DLQ().Replay(e.ctx, ent.ID), dlq.ErrAlreadyReplayed)
	isErr(t, "Replay unknown", e.s.DLQ().Replay(e.ctx, "no-such-entry"), dlq.ErrNotFound)
	// M1 is back at the head of its stream: claimed first, then the rest.
	e.claimExactly("b", 10, m...)
	e.complete("b", outbox.StatusPublished, ids(m...)...)
}

func testReplayAfterRelease(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.enqueue(msgs(2, "d", "s")...)
	e.deadLetter("a", m[0])
	_, err := e.s.ReleaseStream(e.ctx, "d", "s")
	noErr(t, "ReleaseStream", err)
	e.claimExactly("b", 10, m[1])
	e.complete("b", outbox.StatusPublished, m[1].ID)
	noErr(t, "Replay", e.s.DLQ().Replay(e.ctx, onlyEntry(t, e, nil).ID))
	e.claimExactly("b", 10, m[0])
	// a later failure of the replayed message holds the stream again
	n := e.enqueue(msg("d", "s"))[0]
	e.fail("b", store.Failure{ID: m[0].ID})
	e.claimExactly("c", 10)
	e.clk.Advance(time.Minute)
	e.claimExactly("c", 10, m[0], n)
}

func testReplayMatching(t *testing.T, h Harness) {
	e := newEnv(t, h, withOrdering(outbox.OrderingNone))
	a1, a2, b1 := msg("a", ""), msg("a", ""), msg("b", "")
	e.enqueue(a1, a2, b1)
	e.claimExactly("i", 3, a1, a2, b1)
	e.batch("i", store.Batch{Failures: []store.Failure{
		{ID: a1.ID, Permanent: true, Reason: errorhandling.ReasonValidationFailure, Error: "x"},
		{ID: a2.ID, Permanent: true, Reason: errorhandling.ReasonValidationFailure, Error: "x"},
		{ID: b1.ID, Permanent: true, Reason: errorhandling.ReasonValidationFailure, Error: "x"},
	}})
	q := e.s.DLQ()
	f := &dlq.Filters{Destination: "a"}
	would, err := q.ReplayMatching(e.ctx, f, true)
	noErr(t, "ReplayMatching dry run", err)
	eq(t, "dry run entries", len(would), 2)
	for _, ent := range would {
		eq(t, "dry-run Replayed", ent.Replayed, false)
	}
	e.claimExactly("i", 10)
	notReplayed := false
	list, err := q.List(e.ctx, &dlq.Filters{Replayed: &notReplayed})
	noErr(t, "List", err)
	eq(t, "not replayed after dry run", len(list), 3)

	done, err := q.ReplayMatching(e.ctx, f, false)
	noErr(t, "ReplayMatching", err)
	eq(t, "replayed entries", len(done), 2)
	for _, ent := range done {
		eq(t, "Replayed", ent.Replayed, true)
	}
	e.claimExactly("i", 10, a1, a2)
	again, err := q.ReplayMatching(e.ctx, f, false)
	noErr(t, "ReplayMatching again", err)
	eq(t, "replayed again", len(again), 0)
	all, err := q.ReplayMatching(e.ctx, nil, true)
	noErr(t, "ReplayMatching(nil) dry run", err)
	eq(t, "remaining", len(all), 1)
	eq(t, "remaining MessageID", all[0].MessageID, b1.ID.String())
}

func testResolve(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.enqueue(msg("d", ""))[0]
	e.deadLetter("a", m)
	ent := onlyEntry(t, e, nil)
	e.clk.Advance(time.Minute)
	q := e.s.DLQ()
	noErr(t, "Resolve", q.Resolve(e.ctx, ent.ID, "fixed the schema and re-sent by hand"))
	got, err := q.Get(e.ctx, ent.ID)
	noErr(t, "Get", err)
	eq(t, "Status", got.Status, dlq.StatusResolved)
	eq(t, "ResolutionNotes", got.ResolutionNotes, "fixed the schema and re-sent by hand")
	if got.ResolvedAt == nil || !got.ResolvedAt.Equal(e.clk.Now()) {
		t.Fatalf("ResolvedAt = %v, want %v", got.ResolvedAt, e.clk.Now())
	}
	isErr(t, "Resolve unknown", q.Resolve(e.ctx, "nope", "x"), dlq.ErrNotFound)
	pending, err := q.ReplayMatching(e.ctx, nil, true)
	noErr(t, "ReplayMatching", err)
	eq(t, "resolved entries are not bulk-replayed", len(pending), 0)
	eq(t, "resolved filter", len(mustList(t, e, &dlq.Filters{Status: dlq.StatusResolved})), 1)
	eq(t, "pending filter", len(mustList(t, e, &dlq.Filters{Status: dlq.StatusPending})), 0)
}

func testDeleteEntry(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.enqueue(msgs(2, "d", "s")...)
	e.deadLetter("a", m[0])
	ent := onlyEntry(t, e, nil)
	q := e.s.DLQ()
	noErr(t, "Delete", q.Delete(e.ctx, ent.ID))
	_, err := q.Get(e.ctx, ent.ID)
	isErr(t, "Get deleted", err, dlq.ErrNotFound)
	isErr(t, "Delete again", q.Delete(e.ctx, ent.ID), dlq.ErrNotFound)
	e.mustBeGone(m[0].ID)
	e.claimExactly("b", 10, m[1])
}

func testPurge(t *testing.T, h Harness) {
	e := newEnv(t, h)
	q := e.s.DLQ()
	for i := range 5 {
		ft := epoch.Add(time.Duration(i) * time.Hour)
		noErr(t, "Add", q.Add(e.ctx, &dlq.Entry{TaskID: "t", DAGID: "g", FailureTime: ft, ErrorMessage: "x"}))
	}
	m := e.enqueue(msg("d", "s"))[0]
	e.deadLetter("a", m) // at epoch
	n, err := q.Count(e.ctx)
	noErr(t, "Count", err)
	eq(t, "Count", n, 6)
	removed, err := q.PurgeBefore(e.ctx, epoch.Add(2*time.Hour))
	noErr(t, "PurgeBefore", err)
	eq(t, "PurgeBefore removed", removed, 3)
	e.mustBeGone(m.ID)
	n, _ = q.Count(e.ctx)
	eq(t, "Count after PurgeBefore", n, 3)
	noErr(t, "Purge", q.Purge(e.ctx))
	n, _ = q.Count(e.ctx)
	eq(t, "Count after Purge", n, 0)
}

func testAddManual(t *testing.T, h Harness) {
	e := newEnv(t, h)
	q := e.s.DLQ()
	ent := &dlq.Entry{
		TaskInstanceID: "ti-1", TaskID: "charge", DAGRunID: "run-9", DAGID: "checkout",
		Reason: errorhandling.ReasonDependencyFailure, Attempts: 3, ErrorMessage: "payment gateway down",
		Metadata: map[string]interface{}{"http_status": float64(503), "rule": "5xx"},
	}
	noErr(t, "Add", q.Add(e.ctx, ent))
	if ent.ID == "" {
		t.Fatal("Add left the ID empty")
	}
	got, err := q.Get(e.ctx, ent.ID)
	noErr(t, "Get", err)
	eq(t, "Status", got.Status, dlq.StatusPending)
	timeEq(t, "FailureTime", got.FailureTime, epoch)
	eq(t, "TaskInstanceID", got.TaskInstanceID, "ti-1")
	eq(t, "DAGRunID", got.DAGRunID, "run-9")
	eq(t, "Reason", got.Reason, errorhandling.ReasonDependencyFailure)
	eq(t, "FailureReason", got.FailureReason, "DependencyFailure")
	eq(t, "Attempts", got.Attempts, 3)
	eq(t, "Metadata[http_status]", got.Metadata["http_status"], interface{}(float64(503)))
	eq(t, "Metadata[rule]", got.Metadata["rule"], interface{}("5xx"))
	_, err = q.Get(e.ctx, "missing")
	isErr(t, "Get missing", err, dlq.ErrNotFound)

	// An ID the queue holds: ErrExists, and the entry kept as it was.
	again := &dlq.Entry{ID: ent.ID, DAGID: "other", Reason: errorhandling.ReasonUnknown, ErrorMessage: "second"}
	isErr(t, "Add of an existing ID", q.Add(e.ctx, again), dlq.ErrExists)
	got, err = q.Get(e.ctx, ent.ID)
	noErr(t, "Get", err)
	eq(t, "ErrorMessage after a second Add", got.ErrorMessage, "payment gateway down")
	eq(t, "DAGID after a second Add", got.DAGID, "checkout")
}

func mustList(t *testing.T, e *env, f *dlq.Filters) []*dlq.Entry {
	t.Helper()
	list, err := e.s.DLQ().List(e.ctx, f)
	noErr(t, "List", err)
	return list
}
