package storetest

import (
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

var dlqLifeCases = []testCase{
	{"ReplayedEntryLeavesPendingWithActorNotesAndTime", testLifeReplay},
	{"ResolvedEntryCannotBeReplayed", testLifeResolve},
	{"ReplayedEntryCanBeResolved", testLifeResolveReplayed},
	{"BulkReplayRecordsActor", testLifeReplayMatching},
	{"HandDeadLetteredInFlightThenDeliveredIsResolved", testLifeDeliveredAfterHandDeadLetter},
	{"HandDeadLetteredInFlightIsReplayedOnlyOnceItsDeliveryEnds", testLifeReplayWaitsForTheDelivery},
	{"HandDeadLetteredInFlightHoldsItsStreamWhileLeased", testLifeInFlightDeadLetterHoldsStream},
	{"HandDeadLetteredInFlightLeaseLapsedFreedByOperator", testLapsedDeadLetterFreedByOperator},
	{"HandDeadLetteredInFlightLeaseLapsedKeepsHoldingItsStream", testLapsedDeadLetterKeepsHoldingStream},
	{"TextsAreCleanedOnEveryWrite", testLifeCleanTexts},
	{"UnknownStatusIsRefused", testLifeUnknownStatus},
	{"BulkResolveChangesOnlyEntriesStillInTheirListedStatus", testLifeResolveEntries},
	{"BulkDeleteChangesOnlyEntriesStillInTheirListedStatus", testLifeDeleteEntries},
	{"PurgeGoesPageByPage", testLifePurgePages},
}

// parked enqueues n unordered messages, dead-letters each, and returns
// them and the pending entries as listed.
func parked(t *testing.T, e *env, n int) ([]*outbox.Message, []*dlq.Entry) {
	t.Helper()
	m := e.enqueue(msgs(n, "d", "")...)
	for _, x := range m {
		e.deadLetter("a", x)
	}
	listed := mustList(t, e, &dlq.Filters{Status: dlq.StatusPending})
	eq(t, "pending entries", len(listed), n)
	return m, listed
}

// testLifeResolveEntries: ResolveEntriesAs resolves the listed entries
// still pending in one step, and leaves as they are an entry someone
// resolved meanwhile (its actor and notes kept), one replayed meanwhile,
// one deleted, and ids that name nothing.
func testLifeResolveEntries(t *testing.T, h Harness) {
	e := newEnv(t, h, withOrdering(outbox.OrderingNone))
	_, listed := parked(t, e, 5)
	q := e.s.DLQ()
	ids := make([]string, len(listed))
	for i, x := range listed {
		ids[i] = x.ID
	}
	// between the listing and the bulk resolve: alice resolves one, bob
	// replays another, carol deletes a third
	noErr(t, "ResolveAs", q.ResolveAs(e.ctx, ids[0], dlq.Action{Actor: "alice", Notes: "sent by hand"}))
	noErr(t, "Replay", q.Replay(e.ctx, ids[1]))
	noErr(t, "Delete", q.Delete(e.ctx, ids[2]))
	e.clk.Advance(time.Minute)
	done, err := q.ResolveEntriesAs(e.ctx, append(ids, "no-such-entry", "bad\xff\x00id"), dlq.StatusPending,
		dlq.Action{Actor: "dave", Notes: "bulk"})
	noErr(t, "ResolveEntriesAs", err)
	slices.Sort(done)
	want := []string{ids[3], ids[4]}
	slices.Sort(want)
	eq(t, "resolved ids", strings.Join(done, ","), strings.Join(want, ","))
	for _, id := range want {
		got, err := q.Get(e.ctx, id)
		noErr(t, "Get", err)
		eq(t, "Status", got.Status, dlq.StatusResolved)
		eq(t, "ResolvedBy", got.ResolvedBy, "dave")
		if got.ResolvedAt == nil || !got.ResolvedAt.Equal(e.clk.Now()) {
			t.Fatalf("ResolvedAt = %v, want %v", got.ResolvedAt, e.clk.Now())
		}
	}
	alice, err := q.Get(e.ctx, ids[0])
	noErr(t, "Get", err)
	eq(t, "the entry alice resolved keeps her name", alice.ResolvedBy, "alice")
	eq(t, "and her notes", alice.ResolutionNotes, "sent by hand")
	bob, err := q.Get(e.ctx, ids[1])
	noErr(t, "Get", err)
	eq(t, "the entry bob replayed stays replayed", bob.Status, dlq.StatusReplayed)
	_, err = q.Get(e.ctx, ids[2])
	isErr(t, "the deleted entry", err, dlq.ErrNotFound)
	eq(t, "depth", depth(t, e), 0)
	none, err := q.ResolveEntriesAs(e.ctx, nil, dlq.StatusPending, dlq.Action{})
	noErr(t, "ResolveEntriesAs of nothing", err)
	eq(t, "resolved of nothing", len(none), 0)
}

// testLifeDeleteEntries: DeleteEntries removes the listed entries still in
// the status they were listed with (any status when none is given), and
// the messages they alone park; an entry replayed meanwhile stays.
func testLifeDeleteEntries(t *testing.T, h Harness) {
	e := newEnv(t, h, withOrdering(outbox.OrderingNone))
	m, listed := parked(t, e, 4)
	q := e.s.DLQ()
	byMsg := map[string]string{}
	for _, x := range listed {
		byMsg[x.MessageID] = x.ID
	}
	ids := []string{byMsg[m[0].ID.String()], byMsg[m[1].ID.String()], byMsg[m[2].ID.String()]}
	noErr(t, "Replay", q.Replay(e.ctx, ids[0]))
	done, err := q.DeleteEntries(e.ctx, append(ids, "no-such-entry"), dlq.StatusPending)
	noErr(t, "DeleteEntries", err)
	slices.Sort(done)
	want := []string{ids[1], ids[2]}
	slices.Sort(want)
	eq(t, "deleted ids", strings.Join(done, ","), strings.Join(want, ","))
	e.mustBeGone(m[1].ID)
	e.mustBeGone(m[2].ID)
	got, err := q.Get(e.ctx, ids[0])
	noErr(t, "Get the replayed entry", err)
	eq(t, "replayed entry", got.Status, dlq.StatusReplayed)
	// without a status, whatever the entry's
	done, err = q.DeleteEntries(e.ctx, []string{ids[0]}, "")
	noErr(t, "DeleteEntries any status", err)
	eq(t, "deleted the replayed entry", strings.Join(done, ","), ids[0])
	eq(t, "depth", depth(t, e), 1) // the fourth, never listed
}

// testLifePurgePages: a purge of more entries than one page removes them
// all and counts them all.
func testLifePurgePages(t *testing.T, h Harness) {
	e := newEnv(t, h)
	q := e.s.DLQ()
	const n = 2345
	for i := range n {
		ft := epoch.Add(time.Duration(i) * time.Second)
		noErr(t, "Add", q.Add(e.ctx, &dlq.Entry{TaskID: "t", DAGID: "g", FailureTime: ft, ErrorMessage: "x"}))
	}
	removed, err := q.PurgeBefore(e.ctx, epoch.Add(2000*time.Second))
	noErr(t, "PurgeBefore", err)
	eq(t, "PurgeBefore removed", removed, 2000)
	eq(t, "depth after PurgeBefore", depth(t, e), n-2000)
	if left := mustList(t, e, &dlq.Filters{Limit: 1}); len(left) != 1 || left[0].FailureTime.Before(epoch.Add(2000*time.Second)) {
		t.Fatalf("the oldest entry left is %+v, want one dead-lettered at +2000s or later", left)
	}
	noErr(t, "Purge", q.Purge(e.ctx))
	eq(t, "depth after Purge", depth(t, e), 0)
}

// depth is the queue's Count.
func depth(t *testing.T, e *env) int {
	t.Helper()
	n, err := e.s.DLQ().Count(e.ctx)
	noErr(t, "Count", err)
	return n
}

func testLifeReplay(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.enqueue(msg("d", ""), msg("d", ""))
	e.deadLetter("a", m[0])
	e.deadLetter("a", m[1])
	eq(t, "depth with two pending entries", depth(t, e), 2)
	ent := mustList(t, e, &dlq.Filters{Status: dlq.StatusPending})[0]
	e.clk.Advance(time.Minute)
	q := e.s.DLQ()
	noErr(t, "ReplayAs", q.ReplayAs(e.ctx, ent.ID, dlq.Action{Actor: "alice", Notes: "schema fixed"}))
	eq(t, "depth after one replay", depth(t, e), 1)
	got, err := q.Get(e.ctx, ent.ID)
	noErr(t, "Get", err)
	eq(t, "Status", got.Status, dlq.StatusReplayed)
	eq(t, "Replayed", got.Replayed, true)
	eq(t, "ReplayedBy", got.ReplayedBy, "alice")
	eq(t, "ReplayNotes", got.ReplayNotes, "schema fixed")
	if got.ReplayedAt == nil || !got.ReplayedAt.Equal(e.clk.Now()) {
		t.Fatalf("ReplayedAt = %v, want %v", got.ReplayedAt, e.clk.Now())
	}
	eq(t, "replayed filter", len(mustList(t, e, &dlq.Filters{Status: dlq.StatusReplayed})), 1)
	eq(t, "pending filter", len(mustList(t, e, &dlq.Filters{Status: dlq.StatusPending})), 1)
	eq(t, "List keeps the replayed entry", len(mustList(t, e, nil)), 2)
	isErr(t, "Replay again", q.Replay(e.ctx, ent.ID), dlq.ErrAlreadyReplayed)
	would, err := q.ReplayMatching(e.ctx, nil, true)
	noErr(t, "ReplayMatching dry run", err)
	eq(t, "bulk replay candidates", len(would), 1)
	if would[0].ID == ent.ID {
		t.Fatal("bulk replay would replay the replayed entry again")
	}
}

func testLifeResolve(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.enqueue(msg("d", ""))[0]
	e.deadLetter("a", m)
	ent := onlyEntry(t, e, nil)
	q := e.s.DLQ()
	e.clk.Advance(time.Minute)
	noErr(t, "ResolveAs", q.ResolveAs(e.ctx, ent.ID, dlq.Action{Actor: "bob", Notes: "sent by hand"}))
	eq(t, "depth after resolve", depth(t, e), 0)
	got, err := q.Get(e.ctx, ent.ID)
	noErr(t, "Get", err)
	eq(t, "Status", got.Status, dlq.StatusResolved)
	eq(t, "ResolvedBy", got.ResolvedBy, "bob")
	eq(t, "ResolutionNotes", got.ResolutionNotes, "sent by hand")
	if got.ResolvedAt == nil || !got.ResolvedAt.Equal(e.clk.Now()) {
		t.Fatalf("ResolvedAt = %v, want %v", got.ResolvedAt, e.clk.Now())
	}
	isErr(t, "Replay resolved", q.Replay(e.ctx, ent.ID), dlq.ErrResolved)
	isErr(t, "ReplayAs resolved", q.ReplayAs(e.ctx, ent.ID, dlq.Action{Actor: "x"}), dlq.ErrResolved)
	e.claimExactly("b", 10) // the message stays parked
	isErr(t, "ResolveAs unknown", q.ResolveAs(e.ctx, "no-such-entry", dlq.Action{}), dlq.ErrNotFound)
}

func testLifeResolveReplayed(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.enqueue(msg("d", ""))[0]
	e.deadLetter("a", m)
	ent := onlyEntry(t, e, nil)
	q := e.s.DLQ()
	noErr(t, "Replay", q.Replay(e.ctx, ent.ID))
	noErr(t, "ResolveAs", q.ResolveAs(e.ctx, ent.ID, dlq.Action{Actor: "carol", Notes: "replay went through"}))
	got, err := q.Get(e.ctx, ent.ID)
	noErr(t, "Get", err)
	eq(t, "Status", got.Status, dlq.StatusResolved)
	eq(t, "Replayed stays true", got.Replayed, true)
	eq(t, "ResolvedBy", got.ResolvedBy, "carol")
	eq(t, "depth", depth(t, e), 0)
}

func testLifeReplayMatching(t *testing.T, h Harness) {
	e := newEnv(t, h, withOrdering(outbox.OrderingNone))
	m := e.enqueue(msg("a", ""), msg("a", ""), msg("b", ""))
	for _, x := range m {
		e.deadLetter("i", x)
	}
	eq(t, "depth", depth(t, e), 3)
	done, err := e.s.DLQ().ReplayMatchingAs(e.ctx, &dlq.Filters{Destination: "a"}, false,
		dlq.Action{Actor: "ops-bot", Notes: "endpoint back"})
	noErr(t, "ReplayMatchingAs", err)
	eq(t, "replayed", len(done), 2)
	for _, ent := range done {
		eq(t, "returned Status", ent.Status, dlq.StatusReplayed)
		got, err := e.s.DLQ().Get(e.ctx, ent.ID)
		noErr(t, "Get", err)
		eq(t, "Status", got.Status, dlq.StatusReplayed)
		eq(t, "ReplayedBy", got.ReplayedBy, "ops-bot")
		eq(t, "ReplayNotes", got.ReplayNotes, "endpoint back")
	}
	eq(t, "depth after bulk replay", depth(t, e), 1)
	e.claimExactly("i", 10, m[0], m[1])
}

// testLifeDeliveredAfterHandDeadLetter: an operator dead-letters a message
// while a relay delivers it; the delivery completes; the entry is resolved
// as delivered, so replaying it cannot send the message twice.
func testLifeDeliveredAfterHandDeadLetter(t *testing.T, h Harness) {
	for _, retention := range []time.Duration{0, time.Hour} {
		e := newEnv(t, h, func(c *store.Config) { c.Retention = retention })
		m := e.enqueue(msg("d", "s"))[0]
		e.claimExactly("relay", 1, m)
		noErr(t, "DeadLetter", e.s.DeadLetter(e.ctx, m.ID, "looks stuck"))
		eq(t, "depth after hand dead-letter", depth(t, e), 1)
		e.clk.Advance(time.Second)
		e.complete("relay", outbox.StatusPublished, m.ID)
		ent := onlyEntry(t, e, nil)
		eq(t, "Status", ent.Status, dlq.StatusResolved)
		eq(t, "ResolvedBy", ent.ResolvedBy, dlq.ActorBackstop)
		if !strings.Contains(ent.ResolutionNotes, "delivered") || !strings.Contains(ent.ResolutionNotes, "relay") {
			t.Fatalf("ResolutionNotes = %q, want it to say the message was delivered by instance relay", ent.ResolutionNotes)
		}
		if ent.ResolvedAt == nil || !ent.ResolvedAt.Equal(e.clk.Now()) {
			t.Fatalf("ResolvedAt = %v, want %v", ent.ResolvedAt, e.clk.Now())
		}
		eq(t, "depth after delivery", depth(t, e), 0)
		isErr(t, "Replay", e.s.DLQ().Replay(e.ctx, ent.ID), dlq.ErrResolved)
		done, err := e.s.DLQ().ReplayMatching(e.ctx, nil, false)
		noErr(t, "ReplayMatching", err)
		eq(t, "bulk replayed", len(done), 0)
		e.claimExactly("other", 10)
	}
}

func testLifeCleanTexts(t *testing.T, h Harness) {
	e := newEnv(t, h)
	q := e.s.DLQ()
	dirty := "bad\x00byte \xff\xfe and " + strings.Repeat("é", 3000)
	ent := &dlq.Entry{TaskID: "t\x00", DAGID: "g", ErrorMessage: dirty, Fingerprint: "f\xff",
		Headers: map[string]string{"X-A\x00": "v\xff"}, Metadata: map[string]interface{}{"last_error": dirty}}
	noErr(t, "Add", q.Add(e.ctx, ent))
	noErr(t, "ResolveAs", q.ResolveAs(e.ctx, ent.ID, dlq.Action{Actor: "al\x00ice\xff", Notes: dirty}))
	got, err := q.Get(e.ctx, ent.ID)
	noErr(t, "Get", err)
	for what, s := range map[string]string{"TaskID": got.TaskID, "ErrorMessage": got.ErrorMessage,
		"Fingerprint": got.Fingerprint, "ResolvedBy": got.ResolvedBy, "ResolutionNotes": got.ResolutionNotes,
		"Metadata[last_error]": got.Metadata["last_error"].(string)} {
		clean(t, what, s)
	}
	for k, v := range got.Headers {
		clean(t, "header name", k)
		clean(t, "header value", v)
	}
	head := "badbyte \uFFFD and "
	eq(t, "ErrorMessage", got.ErrorMessage, head+strings.Repeat("é", outbox.MaxErrorLength-utf8.RuneCountInString(head)))
	eq(t, "ResolvedBy", got.ResolvedBy, "alice\uFFFD")

	// a failure's error with NUL and invalid UTF-8 is recorded, cleaned,
	// on the message and on its dead-letter entry
	m := e.enqueue(msg("d", ""))[0]
	e.claimExactly("a", 1, m)
	r := e.fail("a", store.Failure{ID: m.ID, Permanent: true, Error: dirty, Fingerprint: "fp\x00"})
	eq(t, "dead-lettered", len(r.DeadLettered), 1)
	clean(t, "message Error", e.get(m.ID).Error)
	list := mustList(t, e, &dlq.Filters{Destination: "d"})
	eq(t, "entries", len(list), 1)
	clean(t, "entry ErrorMessage", list[0].ErrorMessage)
	clean(t, "entry Fingerprint", list[0].Fingerprint)
}

// clean requires s to be what outbox.CleanText keeps: valid UTF-8, no NUL,
// at most 2000 characters.
func clean(t *testing.T, what, s string) {
	t.Helper()
	if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 || utf8.RuneCountInString(s) > outbox.MaxErrorLength {
		t.Fatalf("%s is not clean: %d characters, valid %v, NUL at %d", what, utf8.RuneCountInString(s),
			utf8.ValidString(s), strings.IndexByte(s, 0))
	}
}

func testLifeUnknownStatus(t *testing.T, h Harness) {
	e := newEnv(t, h)
	if err := e.s.DLQ().Add(e.ctx, &dlq.Entry{TaskID: "t", Status: "archived"}); err == nil {
		t.Fatal("Add with status archived succeeded, want an error")
	}
	eq(t, "entries", len(mustList(t, e, nil)), 0)
}

// testLifeReplayWaitsForTheDelivery: an operator dead-letters a message
// while a relay delivers it and tries to replay the entry at once. The
// replay is refused while the delivery goes on (a replay would let another
// relay deliver it beside the first, and its stream's next message go
// before either ends); once the delivery fails, is given back or its
// lease lapses, the entry replays and the message is claimed again.
func testLifeReplayWaitsForTheDelivery(t *testing.T, h Harness) {
	ends := []struct {
		name   string
		end    func(e *env, m *outbox.Message)
		holder string // the row's lease holder after end
	}{
		{"failed", func(e *env, m *outbox.Message) {
			r := e.fail("relay", store.Failure{ID: m.ID, Error: "503"})
			if !containsID(r.Stale, m.ID) || len(r.DeadLettered) != 0 {
				t.Fatalf("failure after the hand dead-letter: Stale %v, DeadLettered %v; want it stale, not dead-lettered again",
					r.Stale, r.DeadLettered)
			}
		}, ""},
		{"released", func(e *env, m *outbox.Message) {
			e.batch("relay", store.Batch{Releases: []store.Release{{ID: m.ID, After: time.Hour}}})
			if got := e.get(m.ID); !got.ScheduledFor.IsZero() {
				t.Fatalf("ScheduledFor = %v after a release, want none: the message is parked", got.ScheduledFor)
			}
		}, ""},
		{"lease lapsed", func(e *env, m *outbox.Message) { e.clk.Advance(31 * time.Second) }, "relay"},
	}
	for _, end := range ends {
		t.Run(end.name, func(t *testing.T) {
			e := newEnv(t, h)
			m := e.enqueue(msg("d", "s"), msg("d", "s"))
			e.claimExactly("relay", 1, m[0])
			noErr(t, "DeadLetter", e.s.DeadLetter(e.ctx, m[0].ID, "looks stuck"))
			ent := onlyEntry(t, e, nil)
			q := e.s.DLQ()
			isErr(t, "Replay while the relay delivers it", q.Replay(e.ctx, ent.ID), dlq.ErrInFlight)
			would, err := q.ReplayMatching(e.ctx, nil, true)
			noErr(t, "ReplayMatching dry run", err)
			eq(t, "bulk replay candidates while in flight", len(would), 0)
			done, err := q.ReplayMatching(e.ctx, nil, false)
			noErr(t, "ReplayMatching", err)
			eq(t, "bulk replayed while in flight", len(done), 0)
			e.claimExactly("other", 10) // neither the parked head nor the message behind it
			renewed := e.batch("relay", store.Batch{RenewLeases: []uuid.UUID{m[0].ID}})
			eq(t, "the delivering relay keeps its lease", len(renewed.Renewed), 1)

			end.end(e, m[0])
			got := e.get(m[0].ID)
			eq(t, "lease holder once the delivery ended", got.InstanceID, end.holder)
			if got.DeadLetteredAt.IsZero() {
				t.Fatal("the message is no longer dead-lettered")
			}
			eq(t, "entries", depth(t, e), 1)
			e.claimExactly("other", 10) // still parked, still holding its stream
			noErr(t, "Replay once the delivery ended", q.Replay(e.ctx, ent.ID))
			e.claimExactly("other", 10, m[0], m[1])
		})
	}
}

// testLifeInFlightDeadLetterHoldsStream: a message dead-lettered by hand
// while a relay delivers it keeps that relay's lease, and a live lease
// holds back the later messages of its stream in every mode but none, even
// where the dead letter itself would not hold them (release ordering, or
// strict once the stream was released past it): they go once the delivery
// ends (here, its lease lapses). Found by store/internal/difftest: the
// PostgreSQL claim passed over such a row without reading its lease.
func testLifeInFlightDeadLetterHoldsStream(t *testing.T, h Harness) {
	for _, tc := range []struct {
		name     string
		o        outbox.Ordering
		released bool
	}{{"release", outbox.OrderingRelease, false}, {"strict released", outbox.OrderingStrict, true}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, h, withOrdering(tc.o))
			m := e.enqueue(msgs(2, "d", "s")...)
			e.claimExactly("relay", 1, m[0])
			noErr(t, "DeadLetter", e.s.DeadLetter(e.ctx, m[0].ID, "looks stuck"))
			if tc.released {
				n, err := e.s.ReleaseStream(e.ctx, "d", "s")
				noErr(t, "ReleaseStream", err)
				eq(t, "released", n, 1)
			}
			e.claimExactly("other", 10) // m[1] waits while the relay delivers m[0]
			e.clk.Advance(31 * time.Second)
			e.claimExactly("other", 10, m[1])
		})
	}
}
