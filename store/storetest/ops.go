package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

var operationsCases = []testCase{
	{"RetryNowMakesWaitingMessageDue", testRetryNow},
	{"ResetAttemptsGivesBackTheFullBudget", testResetAttempts},
	{"DeadLetterByHandParksMessageWithOperatorText", testDeadLetterByHand},
	{"ReleaseStreamCountsBlockingMessages", testReleaseStreamCount},
	{"UnknownIDsAreNotFound", testOpsNotFound},
}

var validateCases = []testCase{
	{"InvalidConfigIsRefused", testInvalidConfig},
	{"ProcessBatchRejectsBadRequests", testBadBatch},
	{"TablePrefixIsHonoured", testTablePrefix},
}

func testRetryNow(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.enqueue(msgs(2, "d", "s")...)
	e.claimExactly("a", 1, m[0])
	e.fail("a", store.Failure{ID: m[0].ID})
	e.claimExactly("a", 10)
	noErr(t, "RetryNow", e.s.RetryNow(e.ctx, m[0].ID))
	timeEq(t, "ScheduledFor", e.get(m[0].ID).ScheduledFor, epoch)
	e.claimExactly("a", 10, m...)
}

func testResetAttempts(t *testing.T, h Harness) {
	e := newEnv(t, h, withMaxAttempts(2))
	m := e.enqueue(msg("d", ""))[0]
	e.claimExactly("a", 1, m)
	e.fail("a", store.Failure{ID: m.ID})
	eq(t, "Attempts", e.get(m.ID).Attempts, 1)
	noErr(t, "ResetAttempts", e.s.ResetAttempts(e.ctx, m.ID))
	eq(t, "Attempts after reset", e.get(m.ID).Attempts, 0)
	e.clk.Advance(time.Minute)
	e.claimExactly("a", 1, m)
	r := e.fail("a", store.Failure{ID: m.ID})
	eq(t, "dead-lettered after reset", len(r.DeadLettered), 0)
	eq(t, "Attempts", e.get(m.ID).Attempts, 1)
}

func testDeadLetterByHand(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.enqueue(msgs(2, "d", "s")...)
	e.claimExactly("a", 1, m[0])
	e.fail("a", store.Failure{ID: m[0].ID, Reason: errorhandling.ReasonTransportUnavailable, Error: "refused"})
	e.clk.Advance(time.Second)
	noErr(t, "DeadLetter", e.s.DeadLetter(e.ctx, m[0].ID, "poison: exceeds memory every time"))
	got := e.get(m[0].ID)
	timeEq(t, "DeadLetteredAt", got.DeadLetteredAt, epoch.Add(time.Second))
	if !got.ScheduledFor.IsZero() {
		t.Fatalf("ScheduledFor = %v, want zero", got.ScheduledFor)
	}
	ent := onlyEntry(t, e, nil)
	eq(t, "MessageID", ent.MessageID, m[0].ID.String())
	eq(t, "Reason", ent.Reason, errorhandling.ReasonPoisonMessage)
	eq(t, "ErrorMessage", ent.ErrorMessage, "poison: exceeds memory every time")
	eq(t, "Attempts", ent.Attempts, 1)
	timeEq(t, "FailureTime", ent.FailureTime, epoch.Add(time.Second))
	e.clk.Advance(time.Hour)
	e.claimExactly("b", 10) // strict: the dead letter holds the stream
	if err := e.s.DeadLetter(e.ctx, m[0].ID, "again"); !errors.Is(err, store.ErrDeadLettered) {
		t.Fatalf("DeadLetter of a dead-lettered message: %v, want ErrDeadLettered", err)
	}
	if err := e.s.DeadLetter(e.ctx, uuid.New(), "nothing"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("DeadLetter of an unknown id: %v, want ErrNotFound", err)
	}
	// A leased message can be parked too: it keeps its lease while that
	// delivery goes on (HandDeadLetteredInFlightIsReplayedOnlyOnceItsDeliveryEnds).
	n := e.enqueue(msg("other", ""))[0]
	e.claimExactly("b", 1, n)
	noErr(t, "DeadLetter(leased)", e.s.DeadLetter(e.ctx, n.ID, "stop it"))
	eq(t, "InstanceID", e.get(n.ID).InstanceID, "b")
	eq(t, "entries", len(mustList(t, e, nil)), 2)
}

func testReleaseStreamCount(t *testing.T, h Harness) {
	e := newEnv(t, h)
	m := e.enqueue(msgs(5, "d", "s")...)
	others := e.enqueue(msg("d", "other"), msg("x", "s"))
	n, err := e.s.ReleaseStream(e.ctx, "d", "s")
	noErr(t, "ReleaseStream (nothing blocking)", err)
	eq(t, "released", n, 0)
	e.claimExactly("a", 2, m[0], m[1])
	e.batch("a", store.Batch{Failures: []store.Failure{{ID: m[0].ID, Error: "x", Permanent: true}, {ID: m[1].ID, Error: "y"}}})
	// failures of another stream and destination are not released
	e.claimExactly("a", 10, others...)
	e.batch("a", store.Batch{Failures: []store.Failure{{ID: others[0].ID, Error: "x"}, {ID: others[1].ID, Error: "x"}}})
	n, err = e.s.ReleaseStream(e.ctx, "d", "s")
	noErr(t, "ReleaseStream", err)
	eq(t, "released", n, 2)
	e.claimExactly("a", 10, m[2], m[3], m[4])
	e.complete("a", outbox.StatusPublished, ids(m[2:]...)...)
	// The released failure is still retried when due.
	e.clk.Advance(time.Minute)
	e.claimExactly("b", 10, m[1], others[0], others[1])
}

func testOpsNotFound(t *testing.T, h Harness) {
	e := newEnv(t, h)
	id := uuid.New()
	isErr(t, "RetryNow", e.s.RetryNow(e.ctx, id), store.ErrNotFound)
	isErr(t, "ResetAttempts", e.s.ResetAttempts(e.ctx, id), store.ErrNotFound)
	isErr(t, "DeadLetter", e.s.DeadLetter(e.ctx, id, "x"), store.ErrNotFound)
}

func testInvalidConfig(t *testing.T, h Harness) {
	for name, mod := range map[string]option{
		"negative LeaseDuration":   func(c *store.Config) { c.LeaseDuration = -time.Second },
		"negative InstanceTimeout": func(c *store.Config) { c.InstanceTimeout = -time.Second },
		"negative Retention":       func(c *store.Config) { c.Retention = -time.Second },
		"bad TablePrefix":          func(c *store.Config) { c.TablePrefix = "Drop-Table;" },
		"bad ordering":             func(c *store.Config) { c.DefaultPolicy.Ordering = "sometimes" },
		"negative MaxAttempts": func(c *store.Config) {
			c.Policies = map[string]store.Policy{"d": {MaxAttempts: -1}}
		},
	} {
		cfg := baseConfig(nil)
		mod(&cfg)
		s, err := h.Open(t, cfg)
		if err == nil {
			_ = s.Close()
			t.Errorf("Open with %s succeeded", name)
		}
	}
}

func testBadBatch(t *testing.T, h Harness) {
	e := newEnv(t, h)
	for name, b := range map[string]*store.Batch{
		"nil batch":        nil,
		"no instance id":   {Claim: store.ClaimRequest{Limit: 1}},
		"negative limit":   {Instance: store.Instance{ID: "a"}, Claim: store.ClaimRequest{Limit: -1}},
		"negative lease":   {Instance: store.Instance{ID: "a"}, Claim: store.ClaimRequest{Limit: 1, Lease: -time.Second}},
		"negative After":   {Instance: store.Instance{ID: "a"}, Releases: []store.Release{{ID: uuid.New(), After: -time.Second}}},
		"negative backoff": {Instance: store.Instance{ID: "a"}, Failures: []store.Failure{{ID: uuid.New(), RetryAfter: -time.Second}}},
	} {
		if _, err := e.s.ProcessBatch(e.ctx, b); err == nil {
			t.Errorf("ProcessBatch with %s succeeded", name)
		}
	}
}

func testTablePrefix(t *testing.T, h Harness) {
	e := newEnv(t, h, func(c *store.Config) { c.TablePrefix = "custom_" })
	m := e.enqueue(msgs(2, "d", "s")...)
	e.deadLetter("a", m[0])
	if h.InsertSQL != nil {
		h.InsertSQL(t, e.s, "d", "plain", nil)
	}
	_, err := e.s.ReleaseStream(e.ctx, "d", "s")
	noErr(t, "ReleaseStream", err)
	got := e.claim("a", 10)
	if len(got) == 0 || got[0].ID != m[1].ID {
		t.Fatalf("claimed %s, want %s first", label(got), m[1].ID)
	}
}
