package storetest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// Poison adapts a store to the quarantine tests: rows written with plain
// SQL that the store cannot decode must be dead-lettered one by one while
// the rest of the batch is claimed, and outcomes the database refuses must
// not block the others.
type Poison struct {
	// Exec runs one statement written for the store, with {prefix}
	// replaced by the table prefix, and returns its error.
	Exec func(t *testing.T, s store.Store, query string) error
	// DropChecks removes the outbox's checks (triggers, constraints) so
	// that BadRows can be written, as in a database that held them before
	// the checks existed.
	DropChecks func(t *testing.T, s store.Store)
	// BadRows are the undecodable rows the store knows of.
	BadRows []BadRow
	// RefuseError makes the database refuse to record the error text
	// text on a message (a trigger), so that one outcome of a batch is
	// refused. nil skips that test.
	RefuseError func(t *testing.T, s store.Store, text string)
	// RefuseDelete makes the database refuse to delete the outbox row of
	// message id (a trigger), so that one delivered message of a batch
	// cannot be recorded. nil skips that test.
	RefuseDelete func(t *testing.T, s store.Store, id uuid.UUID)
	// Oversize are rows larger than any message may carry
	// (outbox.MaxLimits): a payload over 64 MiB, headers over the stored
	// size a claim reads (store.MaxStoredHeaderBytes) or over the headers'
	// limits. The claim quarantines them, the largest unread. nil skips
	// that test.
	Oversize []BadRow
	// BadCircuits are circuits rows holding values the store cannot use
	// as they are, for the fleet suite (RunFleet). nil skips that test.
	BadCircuits []BadCircuit
}

// BadRow is one row the store cannot decode.
type BadRow struct {
	// Name names the case.
	Name string
	// SQL inserts the row: {prefix} is the table prefix, {dest} the
	// destination and {stream} a stream naming the case, such as
	//	INSERT INTO {prefix}outbox (destination, stream, type, attempts) VALUES ('{dest}', '{stream}', 't', 'x')
	SQL string
	// Column is the column the dead-letter entry's error must name, and
	// Value how it must show the bad value.
	Column, Value string
	// Refused is a text the error of the same INSERT holds while the
	// checks are in place; empty when the schema cannot refuse the row.
	Refused string
}

var poisonCases = []testCase{
	{"UndecodableRowsAreQuarantinedOneByOne", testQuarantineOneByOne},
	{"EachUndecodableRowAlone", testQuarantineEach},
	{"SchemaRefusesUndecodableRows", testSchemaRefuses},
	{"RefusedOutcomeDoesNotBlockTheOthers", testRejectedOutcome},
	{"RefusedDeleteDoesNotBlockTheOthers", testRejectedDelete},
	{"CompletionWithoutPublishedNeedsTheLease", testLeaseSafeCompletion},
	{"DirtyTextsAreRecordedClean", testDirtyOutcomeTexts},
	{"DirtyInstanceIsRefusedOrCleaned", testDirtyInstance},
	{"UndecodableRowsAreShownNotFailingTheList", testUndecodableShown},
	{"OversizeRowsAreQuarantined", testOversizeQuarantined},
}

// testOversizeQuarantined: a row larger than any message may carry is
// quarantined by the claim that takes it, never delivered, and claims
// within a byte budget, as a relay makes them, do not stall behind it:
// the first that meets it stops before it (its size counts), the next
// takes it alone, as its first of any size, to be quarantined.
func testOversizeQuarantined(t *testing.T, h Harness) {
	p := needPoison(t, h)
	if len(p.Oversize) == 0 {
		t.Skip("Harness.Poison.Oversize not set")
	}
	for i, r := range p.Oversize {
		t.Run(r.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, h, withOrdering(outbox.OrderingNone))
			p.DropChecks(t, e.s)
			stream := fmt.Sprintf("big-%d", i)
			before := e.enqueue(msg("d", ""))
			insertBad(t, e, p, r, "d", stream)
			after := e.enqueue(msg("d", ""))
			var claimed []*outbox.Message
			quarantined := 0
			for range 3 {
				res := e.batch("relay", store.Batch{Claim: store.ClaimRequest{Limit: 10, MaxBytes: 1 << 20, FirstAnySize: true}})
				claimed = append(claimed, res.Claimed...)
				quarantined += len(res.Quarantined)
			}
			sameIDs(t, "claimed", claimed, append(before, after...)...)
			eq(t, "quarantined", quarantined, 1)
			checkQuarantined(t, e, map[string]BadRow{stream: r})
		})
	}
}

func testDirtyInstance(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.enqueue(msg("d", ""))[0]
	_, err := e.s.ProcessBatch(e.ctx, &store.Batch{Instance: store.Instance{ID: "relay\x00\xff"},
		Claim: store.ClaimRequest{Limit: 1}})
	isErr(t, "ProcessBatch with a NUL in Instance.ID", err, store.ErrInvalidBatch)
	res, err := e.s.ProcessBatch(e.ctx, &store.Batch{Instance: store.Instance{ID: "relay", Host: "host\x00\xfe"},
		Claim: store.ClaimRequest{Limit: 1}})
	noErr(t, "ProcessBatch with a NUL in Instance.Host", err)
	sameIDs(t, "claimed", res.Claimed, m)
}

func needPoison(t *testing.T, h Harness) *Poison {
	t.Helper()
	if h.Poison == nil || h.Poison.Exec == nil || h.Poison.DropChecks == nil {
		t.Skip("Harness.Poison not set")
	}
	return h.Poison
}

// insertBad writes row r for destination dest with stream stream.
func insertBad(t *testing.T, e *env, p *Poison, r BadRow, dest, stream string) {
	t.Helper()
	q := strings.NewReplacer("{dest}", dest, "{stream}", stream).Replace(r.SQL)
	if err := p.Exec(t, e.s, q); err != nil {
		t.Fatalf("%s: %v\n%s", r.Name, err, q)
	}
}

func testQuarantineOneByOne(t *testing.T, h Harness) {
	p := needPoison(t, h)
	e := newEnv(t, h, withOrdering(outbox.OrderingNone))
	p.DropChecks(t, e.s)
	var good []*outbox.Message
	bad := map[string]BadRow{}
	for i, r := range p.BadRows {
		good = append(good, e.enqueue(msg("d", ""))...)
		stream := fmt.Sprintf("bad-%d", i)
		insertBad(t, e, p, r, "d", stream)
		bad[stream] = r
	}
	good = append(good, e.enqueue(msg("d", ""))...)
	res := e.batch("relay", store.Batch{Claim: store.ClaimRequest{Limit: 100}})
	sameIDs(t, "claimed", res.Claimed, good...)
	eq(t, "quarantined", len(res.Quarantined), len(p.BadRows))
	checkQuarantined(t, e, bad)
	e.claimExactly("relay", 100)
	e.complete("relay", outbox.StatusPublished, ids(good...)...)
	eq(t, "depth", depth(t, e), len(p.BadRows))
}

// checkQuarantined requires one SerializationError entry per bad row,
// found by its stream, its error naming the column and the value.
func checkQuarantined(t *testing.T, e *env, rows map[string]BadRow) {
	t.Helper()
	reason := errorhandling.ReasonSerializationError
	list := mustList(t, e, &dlq.Filters{Reason: &reason})
	eq(t, "SerializationError entries", len(list), len(rows))
	byStream := map[string]*dlq.Entry{}
	for _, en := range list {
		byStream[en.Stream] = en
	}
	for stream, r := range rows {
		en := byStream[stream]
		if en == nil {
			t.Fatalf("%s: no dead-letter entry for its row; entries: %v", r.Name, streamsOf(list))
		}
		if !strings.Contains(en.ErrorMessage, "column "+r.Column+":") || !strings.Contains(en.ErrorMessage, r.Value) {
			t.Errorf("%s: entry error %q does not name column %s and value %s", r.Name, en.ErrorMessage, r.Column, r.Value)
		}
		if en.MessageID == "" || en.Status != dlq.StatusPending || en.Destination == "" {
			t.Errorf("%s: entry %+v lacks its message", r.Name, en)
		}
	}
}

func streamsOf(list []*dlq.Entry) []string {
	out := make([]string, len(list))
	for i, en := range list {
		out[i] = en.Stream + ": " + en.ErrorMessage
	}
	return out
}

func testQuarantineEach(t *testing.T, h Harness) {
	p := needPoison(t, h)
	for i, r := range p.BadRows {
		t.Run(r.Name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, h)
			p.DropChecks(t, e.s)
			before := e.enqueue(msg("d", "s"))
			insertBad(t, e, p, r, "d", fmt.Sprintf("bad-%d", i))
			after := e.enqueue(msg("d", "other"))
			res := e.batch("relay", store.Batch{Claim: store.ClaimRequest{Limit: 10}})
			sameIDs(t, "claimed", res.Claimed, append(before, after...)...)
			eq(t, "quarantined", len(res.Quarantined), 1)
			checkQuarantined(t, e, map[string]BadRow{fmt.Sprintf("bad-%d", i): r})
			e.get(res.Quarantined[0]) // mended: the row reads back
		})
	}
}

func testSchemaRefuses(t *testing.T, h Harness) {
	p := needPoison(t, h)
	e := newEnv(t, h)
	for i, r := range p.BadRows {
		if r.Refused == "" {
			continue
		}
		q := strings.NewReplacer("{dest}", "d", "{stream}", fmt.Sprintf("bad-%d", i)).Replace(r.SQL)
		err := p.Exec(t, e.s, q)
		if err == nil || !strings.Contains(err.Error(), r.Refused) {
			t.Errorf("%s: INSERT error = %v, want one holding %q", r.Name, err, r.Refused)
		}
	}
	e.claimExactly("relay", 10)
}

func testRejectedOutcome(t *testing.T, h Harness) {
	p := needPoison(t, h)
	if p.RefuseError == nil {
		t.Skip("Poison.RefuseError not set")
	}
	e := newEnv(t, h, withOrdering(outbox.OrderingNone))
	p.RefuseError(t, e.s, "poison outcome")
	m := e.enqueue(msg("d", ""), msg("d", ""), msg("d", ""), msg("d", ""))
	e.claimExactly("relay", 3, m[:3]...)
	res := e.batch("relay", store.Batch{
		Completions: []store.Completion{{ID: m[0].ID, Status: outbox.StatusPublished}},
		Failures: []store.Failure{
			{ID: m[1].ID, Error: "poison outcome"},
			{ID: m[2].ID, Error: "timeout", Reason: errorhandling.ReasonTimeoutExceeded},
		},
		Claim: store.ClaimRequest{Limit: 10},
	})
	eq(t, "rejected", len(res.Rejected), 1)
	eq(t, "rejected id", res.Rejected[0].ID, m[1].ID)
	if res.Rejected[0].Err == nil {
		t.Fatal("the rejection carries no error")
	}
	sameIDs(t, "claimed in the same call", res.Claimed, m[3])
	e.mustBeGone(m[0].ID)
	eq(t, "the other failure's attempts", e.get(m[2].ID).Attempts, 1)
	got := e.get(m[1].ID)
	eq(t, "the refused failure's attempts", got.Attempts, 0)
	eq(t, "the refused message keeps its lease", got.InstanceID, "relay")
	// the relay tries again with a failure the database takes
	r2 := e.batch("relay", store.Batch{Failures: []store.Failure{{ID: m[1].ID, Error: "poison outcome, reworded"}}})
	eq(t, "rejected on retry", len(r2.Rejected), 0)
	eq(t, "attempts after retry", e.get(m[1].ID).Attempts, 1)
}

// testRejectedDelete: a batch of deliveries, all recorded in one
// statement where the store can, whose one row the database refuses to
// delete: the others are deleted, that one is rejected and keeps its
// lease.
func testRejectedDelete(t *testing.T, h Harness) {
	p := needPoison(t, h)
	if p.RefuseDelete == nil {
		t.Skip("Poison.RefuseDelete not set")
	}
	e := newEnv(t, h, withOrdering(outbox.OrderingNone))
	m := e.enqueue(msg("d", ""), msg("d", ""), msg("d", ""), msg("d", ""))
	e.claimExactly("relay", 4, m...)
	p.RefuseDelete(t, e.s, m[2].ID)
	var cs []store.Completion
	for _, x := range m {
		cs = append(cs, store.Completion{ID: x.ID, Status: outbox.StatusPublished})
	}
	res := e.batch("relay", store.Batch{Completions: cs})
	eq(t, "rejected", len(res.Rejected), 1)
	eq(t, "rejected id", res.Rejected[0].ID, m[2].ID)
	for _, x := range []*outbox.Message{m[0], m[1], m[3]} {
		e.mustBeGone(x.ID)
	}
	eq(t, "the refused message keeps its lease", e.get(m[2].ID).InstanceID, "relay")
}

func testLeaseSafeCompletion(t *testing.T, h Harness) {
	e := newEnv(t, h, withOrdering(outbox.OrderingNone))
	m := e.enqueue(msg("d", ""), msg("d", ""))
	e.claimExactly("a", 2, m...)
	e.clk.Advance(time.Minute) // a's leases lapse
	e.claimExactly("b", 2, m...)
	res := e.batch("a", store.Batch{Completions: []store.Completion{
		{ID: m[0].ID, Status: 0},                        // the Status=0 release
		{ID: m[1].ID, Status: outbox.StatusEventStored}, // a partial step
	}})
	eq(t, "stale", len(res.Stale), 2)
	for _, x := range m {
		if !containsID(res.Stale, x.ID) {
			t.Fatalf("Stale = %v, want %s in it", res.Stale, x.ID)
		}
		got := e.get(x.ID)
		eq(t, "lease holder", got.InstanceID, "b")
		eq(t, "status", got.Status, outbox.StatusStored)
	}
	// b, the holder, records its partial step; a delivery by anyone is
	// delivered
	res = e.batch("b", store.Batch{Completions: []store.Completion{{ID: m[1].ID, Status: outbox.StatusEventStored}}})
	eq(t, "stale for the holder", len(res.Stale), 0)
	eq(t, "status after the holder's step", e.get(m[1].ID).Status, outbox.StatusStored|outbox.StatusEventStored)
	e.complete("a", outbox.StatusPublished, m[0].ID)
	e.mustBeGone(m[0].ID)
}

func testDirtyOutcomeTexts(t *testing.T, h Harness) {
	e := newEnv(t, h, withOrdering(outbox.OrderingNone))
	m := e.enqueue(msg("d", ""), msg("d", ""), msg("d", ""))
	e.claimExactly("a", 3, m...)
	dirty := "handler said \x00no\xff\xfe " + strings.Repeat("x", 5000)
	res := e.batch("a", store.Batch{
		Failures: []store.Failure{{ID: m[0].ID, Error: dirty, Fingerprint: "f\x00p\xff"}},
		Releases: []store.Release{{ID: m[1].ID, After: time.Minute, Error: dirty}},
		Claim:    store.ClaimRequest{Limit: 1},
	})
	eq(t, "rejected", len(res.Rejected), 0)
	for _, x := range m[:2] {
		got := e.get(x.ID)
		clean(t, "Error", got.Error)
		if !strings.HasPrefix(got.Error, "handler said no\uFFFD ") {
			t.Fatalf("Error = %.40q..., want the cleaned text", got.Error)
		}
	}
	clean(t, "Fingerprint", e.get(m[0].ID).Fingerprint)
	noErr(t, "DeadLetter", e.s.DeadLetter(e.ctx, m[2].ID, dirty))
	en := mustList(t, e, &dlq.Filters{Destination: "d"})
	eq(t, "entries", len(en), 1)
	clean(t, "operator's reason", en[0].ErrorMessage)
}

// testUndecodableShown: an operator's list (and Get) of messages shows a
// row the store cannot decode, not yet quarantined (such rows hold only
// databases written before the checks), with the value named in Error;
// one such row used to make the whole list fail.
func testUndecodableShown(t *testing.T, h Harness) {
	p := needPoison(t, h)
	e := newEnv(t, h)
	adm, ok := e.s.(store.Admin)
	if !ok {
		t.Skip("the store has no operator views")
	}
	p.DropChecks(t, e.s)
	good := e.enqueue(msg("d", "good"))[0]
	for i, r := range p.BadRows {
		insertBad(t, e, p, r, "d", fmt.Sprintf("bad-%d", i))
	}
	list, err := adm.ListMessages(e.ctx, store.MessageFilter{Limit: 1000})
	noErr(t, "ListMessages over undecodable rows", err)
	eq(t, "messages listed", len(list), 1+len(p.BadRows))
	shown := 0
	for _, m := range list {
		if m.ID == good.ID {
			eq(t, "the good message's Error", m.Error, "")
			continue
		}
		if !strings.HasPrefix(m.Error, "undecodable outbox row") {
			t.Errorf("row seq %d listed with Error %q, want it to say the row is undecodable", m.Seq, m.Error)
			continue
		}
		shown++
		if m.ID != uuid.Nil {
			got, err := e.s.Get(e.ctx, m.ID)
			noErr(t, "Get of an undecodable row", err)
			eq(t, "Get's Error", got.Error, m.Error)
		}
	}
	eq(t, "undecodable rows shown", shown, len(p.BadRows))
	for _, r := range p.BadRows {
		found := false
		for _, m := range list {
			found = found || strings.Contains(m.Error, "column "+r.Column+":")
		}
		if !found {
			t.Errorf("%s: no listed row's Error names column %s", r.Name, r.Column)
		}
	}
}
