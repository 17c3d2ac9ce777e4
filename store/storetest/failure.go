package storetest

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/retry"
	"github.com/backstophq/backstop/store"
)

var failureCases = []testCase{
	{"PartialCompletionFlagsAreORed", testPartialCompletion},
	{"ErrorCappedAt2000Characters", testErrorCap},
	{"PermanentFailureDeadLettersAtOnceWithItsReason", testPermanentFailure},
	{"MaxAttemptsReachedDeadLettersAsPoisonMessage", testMaxAttempts},
	{"StrategyStopDeadLettersAsPoisonMessage", testStrategyStop},
	{"RetryAfterIsALowerBoundOnTheDelay", testRetryAfter},
	{"PerDestinationPolicyDecidesDelayAndAttempts", testPerDestinationPolicy},
	{"StaleFailureFromNonHolderIgnored", testStaleFailure},
	{"FailuresOfOneBatchAreIndependent", testFailuresIndependent},
}

func testPartialCompletion(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.enqueue(msg("d", ""))[0]
	e.claimExactly("a", 1, m)
	e.fail("a", store.Failure{ID: m.ID, CompletedStatus: outbox.StatusStored | outbox.StatusEventStored, Error: "Transport unavailable"})
	want := outbox.StatusStored | outbox.StatusEventStored | outbox.StatusFailed
	eq(t, "Status", e.get(m.ID).Status, want)
	e.clk.Advance(time.Minute)
	e.claimExactly("a", 1, m)
	e.fail("a", store.Failure{ID: m.ID, CompletedStatus: 0})
	eq(t, "Status after a failure completing nothing", e.get(m.ID).Status, want)

	n := e.enqueue(msg("d", ""))[0]
	e.claimExactly("a", 1, n)
	e.complete("a", outbox.StatusEventStored, n.ID)
	got := e.get(n.ID)
	eq(t, "Status after partial completion", got.Status, outbox.StatusStored|outbox.StatusEventStored)
	eq(t, "InstanceID after partial completion", got.InstanceID, "")
	e.claimExactly("b", 1, n)
}

func testErrorCap(t *testing.T, h Harness) {
	e := newEnv(t, h, withOrdering(outbox.OrderingNone))
	for _, tc := range []struct{ name, text string }{
		{"ascii", strings.Repeat("x", 3000)},
		{"multibyte", strings.Repeat("é", 1500) + strings.Repeat("日本", 600)},
		{"exactly2000", strings.Repeat("ü", 2000)},
	} {
		m := e.enqueue(msg("d", ""))[0]
		e.claimExactly("a", 1, m)
		e.fail("a", store.Failure{ID: m.ID, Error: tc.text})
		got := e.get(m.ID).Error
		if !utf8.ValidString(got) {
			t.Fatalf("%s: stored error is not valid UTF-8", tc.name)
		}
		eq(t, tc.name+" error runes", utf8.RuneCountInString(got), outbox.MaxErrorLength)
		eq(t, tc.name+" error prefix", got, string([]rune(tc.text)[:outbox.MaxErrorLength]))
	}
	m := e.enqueue(msg("d", ""))[0]
	e.claimExactly("a", 1, m)
	e.fail("a", store.Failure{ID: m.ID, Error: strings.Repeat("ß", 2500), Permanent: true})
	ent := onlyEntry(t, e, &dlq.Filters{})
	eq(t, "entry error runes", utf8.RuneCountInString(ent.ErrorMessage), outbox.MaxErrorLength)
}

func onlyEntry(t *testing.T, e *env, f *dlq.Filters) *dlq.Entry {
	t.Helper()
	list, err := e.s.DLQ().List(context.Background(), f)
	noErr(t, "DLQ List", err)
	if len(list) != 1 {
		t.Fatalf("DLQ holds %d entries, want 1", len(list))
	}
	return list[0]
}

func testPermanentFailure(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := msg("billing", "order-7")
	m.Headers = map[string]string{"k": "v"}
	e.enqueue(m)
	e.claimExactly("a", 1, m)
	r := e.fail("a", store.Failure{
		ID: m.ID, Permanent: true, Error: "schema mismatch", Fingerprint: "fp",
		Reason: errorhandling.ReasonValidationFailure, CompletedStatus: outbox.StatusEventStored,
	})
	sameUUIDs(t, "DeadLettered", r.DeadLettered, m.ID)
	got := e.get(m.ID)
	timeEq(t, "DeadLetteredAt", got.DeadLetteredAt, epoch)
	if !got.ScheduledFor.IsZero() {
		t.Fatalf("dead-lettered message is scheduled for %v", got.ScheduledFor)
	}
	eq(t, "Attempts", got.Attempts, 1)
	eq(t, "Status", got.Status, outbox.StatusStored|outbox.StatusEventStored|outbox.StatusFailed)
	eq(t, "InstanceID", got.InstanceID, "")
	ent := onlyEntry(t, e, nil)
	eq(t, "MessageID", ent.MessageID, m.ID.String())
	eq(t, "Reason", ent.Reason, errorhandling.ReasonValidationFailure)
	eq(t, "FailureReason", ent.FailureReason, "ValidationFailure")
	eq(t, "Destination", ent.Destination, "billing")
	eq(t, "Stream", ent.Stream, "order-7")
	eq(t, "Type", ent.Type, m.Type)
	eq(t, "Payload", string(ent.Payload), string(m.Payload))
	eq(t, "Headers[k]", ent.Headers["k"], "v")
	eq(t, "Seq", ent.Seq, got.Seq)
	eq(t, "Attempts", ent.Attempts, 1)
	eq(t, "ErrorMessage", ent.ErrorMessage, "schema mismatch")
	eq(t, "Fingerprint", ent.Fingerprint, "fp")
	eq(t, "Status", ent.Status, dlq.StatusPending)
	eq(t, "Replayed", ent.Replayed, false)
	timeEq(t, "FailureTime", ent.FailureTime, epoch)
	timeEq(t, "FirstFailureTime", ent.FirstFailureTime, epoch)
	timeEq(t, "LastAttemptTime", ent.LastAttemptTime, epoch)
	e.clk.Advance(48 * time.Hour)
	e.claimExactly("b", 10)
}

func testMaxAttempts(t *testing.T, h Harness) {
	e := newEnv(t, h, withMaxAttempts(3))
	m := e.enqueue(msg("d", ""))[0]
	first := epoch
	var last time.Time
	for i := 1; i <= 3; i++ {
		got := e.claimExactly("a", 1, m)
		eq(t, "Attempts before try", got[0].Attempts, i-1)
		last = e.clk.Now()
		r := e.fail("a", store.Failure{ID: m.ID, Reason: errorhandling.ReasonTransportUnavailable, Error: "refused"})
		if i < 3 {
			eq(t, "len(DeadLettered)", len(r.DeadLettered), 0)
			e.clk.Advance(time.Hour)
			continue
		}
		sameUUIDs(t, "DeadLettered", r.DeadLettered, m.ID)
	}
	got := e.get(m.ID)
	eq(t, "Attempts", got.Attempts, 3)
	timeEq(t, "DeadLetteredAt", got.DeadLetteredAt, last)
	ent := onlyEntry(t, e, nil)
	eq(t, "Reason", ent.Reason, errorhandling.ReasonPoisonMessage)
	eq(t, "FailureReason", ent.FailureReason, "PoisonMessage")
	eq(t, "Attempts", ent.Attempts, 3)
	eq(t, "ErrorMessage", ent.ErrorMessage, "refused")
	timeEq(t, "FirstFailureTime", ent.FirstFailureTime, first)
	timeEq(t, "LastAttemptTime", ent.LastAttemptTime, last)
}

type stopAfter int

func (s stopAfter) Delay(n int) time.Duration {
	if n > int(s) {
		return retry.Stop
	}
	return time.Second
}

func testStrategyStop(t *testing.T, h Harness) {
	e := newEnv(t, h, withStrategy(stopAfter(1)))
	m := e.enqueue(msg("d", ""))[0]
	e.claimExactly("a", 1, m)
	eq(t, "len(DeadLettered) after 1st", len(e.fail("a", store.Failure{ID: m.ID}).DeadLettered), 0)
	e.clk.Advance(time.Second)
	e.claimExactly("a", 1, m)
	r := e.fail("a", store.Failure{ID: m.ID})
	sameUUIDs(t, "DeadLettered", r.DeadLettered, m.ID)
	eq(t, "Reason", onlyEntry(t, e, nil).Reason, errorhandling.ReasonPoisonMessage)
}

func testRetryAfter(t *testing.T, h Harness) {
	e := newEnv(t, h, withOrdering(outbox.OrderingNone))
	a, b := msg("d", ""), msg("d", "")
	e.enqueue(a, b)
	e.claimExactly("i", 2, a, b)
	e.batch("i", store.Batch{Failures: []store.Failure{
		{ID: a.ID, Error: "429", RetryAfter: 5 * time.Minute},
		{ID: b.ID, Error: "429", RetryAfter: 10 * time.Second},
	}})
	timeEq(t, "ScheduledFor (RetryAfter above delay)", e.get(a.ID).ScheduledFor, epoch.Add(5*time.Minute))
	timeEq(t, "ScheduledFor (RetryAfter below delay)", e.get(b.ID).ScheduledFor, epoch.Add(time.Minute))
}

func testPerDestinationPolicy(t *testing.T, h Harness) {
	e := newEnv(t, h, func(c *store.Config) {
		c.Policies = map[string]store.Policy{"slow": {Strategy: constant(10 * time.Minute), MaxAttempts: 1}}
	})
	s, d := msg("slow", ""), msg("default", "")
	e.enqueue(s, d)
	e.claimExactly("i", 2, s, d)
	r := e.batch("i", store.Batch{Failures: []store.Failure{{ID: s.ID, Error: "x"}, {ID: d.ID, Error: "x"}}})
	sameUUIDs(t, "DeadLettered (MaxAttempts 1)", r.DeadLettered, s.ID)
	timeEq(t, "default ScheduledFor", e.get(d.ID).ScheduledFor, epoch.Add(time.Minute))

	e2 := newEnv(t, h, func(c *store.Config) {
		c.Policies = map[string]store.Policy{"slow": {Strategy: constant(10 * time.Minute)}}
	})
	m := e2.enqueue(msg("slow", ""))[0]
	e2.claimExactly("i", 1, m)
	e2.fail("i", store.Failure{ID: m.ID})
	timeEq(t, "slow ScheduledFor", e2.get(m.ID).ScheduledFor, epoch.Add(10*time.Minute))
}

func testStaleFailure(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.enqueue(msg("d", ""))[0]
	e.claimExactly("a", 1, m)
	unknown := uuid.New()
	r := e.batch("b", store.Batch{Failures: []store.Failure{{ID: m.ID, Error: "not mine"}, {ID: unknown, Error: "gone"}}})
	sameUUIDs(t, "Stale", r.Stale, m.ID, unknown)
	got := e.get(m.ID)
	eq(t, "Attempts", got.Attempts, 0)
	eq(t, "Error", got.Error, "")
	eq(t, "InstanceID", got.InstanceID, "a")
	eq(t, "Status", got.Status, outbox.StatusStored)
}

func testFailuresIndependent(t *testing.T, h Harness) {
	e := newEnv(t, h, withOrdering(outbox.OrderingNone))
	a, b, c := msg("d", ""), msg("d", ""), msg("d", "")
	e.enqueue(a, b, c)
	e.claimExactly("i", 3, a, b, c)
	r := e.batch("i", store.Batch{
		Failures: []store.Failure{
			{ID: a.ID, Error: "x", Permanent: true},
			{ID: uuid.New(), Error: "unknown"},
			{ID: b.ID, Error: "y"},
		},
		Completions: []store.Completion{{ID: c.ID, Status: outbox.StatusPublished}},
	})
	sameUUIDs(t, "DeadLettered", r.DeadLettered, a.ID)
	eq(t, "len(Stale)", len(r.Stale), 1)
	eq(t, "b Attempts", e.get(b.ID).Attempts, 1)
	e.mustBeGone(c.ID)
}

// sameUUIDs requires got to hold exactly want, in any order.
func sameUUIDs(t *testing.T, what string, got []uuid.UUID, want ...uuid.UUID) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
	for _, w := range want {
		if !containsID(got, w) {
			t.Fatalf("%s = %v, want %v", what, got, want)
		}
	}
}
