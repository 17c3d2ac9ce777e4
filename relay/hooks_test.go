package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// TestHooksAndDeadLetterManager: the hooks see each recorded outcome, and
// a dlq.Manager wired to the relay fires its alerts for the relay's own
// dead letters.
func TestHooksAndDeadLetterManager(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withOrdering(outbox.OrderingNone))
	good, flaky, bad := msg("orders", "a", 1), msg("orders", "b", 2), msg("orders", "c", 3)
	e.enqueue(good, flaky, bad)
	rec := &recorder{fn: func(_ context.Context, m *outbox.Message, _ int) error {
		switch m.ID {
		case flaky.ID:
			return errorhandling.WithBlame(errorhandling.Transient(errors.New("flaky payload")), errorhandling.BlameMessage)
		case bad.ID:
			return errorhandling.WithReason(errorhandling.Permanent(errors.New("malformed")), errorhandling.ReasonValidationFailure)
		}
		return nil
	}}
	var mu sync.Mutex
	var delivered []uuid.UUID
	var failures, dead []Failure
	var added []*dlq.Entry
	var thresholds []int
	mgr := dlq.NewManager(e.s.DLQ(), 1, dlq.WithLogger(slog.New(slog.DiscardHandler)))
	mgr.OnEntryAdded(func(en *dlq.Entry) { mu.Lock(); added = append(added, en); mu.Unlock() })
	mgr.OnThresholdReached(func(n int) { mu.Lock(); thresholds = append(thresholds, n); mu.Unlock() })
	cfg := e.config(map[string]Destination{"orders": {Transport: rec.transport()}})
	cfg.OnDelivered = func(m *outbox.Message) { mu.Lock(); delivered = append(delivered, m.ID); mu.Unlock() }
	cfg.OnFailure = func(f Failure) { mu.Lock(); failures = append(failures, f); mu.Unlock() }
	cfg.OnDeadLetter = func(f Failure) {
		mu.Lock()
		dead = append(dead, f)
		mu.Unlock()
		panic("a hook's bug must not take the relay down")
	}
	cfg.DeadLetters = mgr
	rn := e.start(cfg)
	rn.settle()
	mu.Lock()
	defer mu.Unlock()
	if len(delivered) != 1 || delivered[0] != good.ID {
		t.Fatalf("OnDelivered saw %v", delivered)
	}
	if len(failures) != 1 || failures[0].Message.ID != flaky.ID || failures[0].Attempts != 1 || failures[0].Permanent {
		t.Fatalf("OnFailure saw %+v", failures)
	}
	if len(dead) != 1 || dead[0].Message.ID != bad.ID || !dead[0].Permanent || dead[0].Reason != errorhandling.ReasonValidationFailure {
		t.Fatalf("OnDeadLetter saw %+v", dead)
	}
	if len(added) != 1 || added[0].MessageID != bad.ID.String() || added[0].ErrorMessage != "malformed" {
		t.Fatalf("the manager's OnEntryAdded saw %+v", added)
	}
	if len(thresholds) != 1 || thresholds[0] != 1 {
		t.Fatalf("the manager's OnThresholdReached saw %v", thresholds)
	}
	if !e.logs.contains("relay hook panicked") {
		t.Fatal("the hook's panic was not logged")
	}
}

// refusing is a store that refuses every call recording a failure of one
// message, as a store may refuse a value it cannot keep.
type refusing struct {
	store.Store
	bad uuid.UUID
}

func (s *refusing) ProcessBatch(ctx context.Context, b *store.Batch) (*store.Result, error) {
	for _, f := range b.Failures {
		if f.ID == s.bad {
			return nil, errors.New("invalid byte sequence for encoding")
		}
	}
	return s.Store.ProcessBatch(ctx, b)
}

// TestPoisonOutcomeDoesNotWedgeTheRelay: the store refuses to record one
// outcome. The relay records every other outcome, keeps claiming and
// delivering, and drops that one with an error record.
func TestPoisonOutcomeDoesNotWedgeTheRelay(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withOrdering(outbox.OrderingNone))
	var msgs []*outbox.Message
	for i := range 10 {
		msgs = append(msgs, msg("orders", string(rune('a'+i)), i))
	}
	e.enqueue(msgs...)
	poison := msgs[3]
	rec := &recorder{fn: func(_ context.Context, m *outbox.Message, _ int) error {
		if m.ID == poison.ID {
			return errorhandling.WithBlame(errorhandling.Transient(errors.New("bad\x00text")), errorhandling.BlameMessage)
		}
		return nil
	}}
	r, err := New(&refusing{Store: e.s, bad: poison.ID}, e.config(map[string]Destination{"orders": {Transport: rec.transport()}}))
	if err != nil {
		t.Fatal(err)
	}
	rn := e.run(r)
	rn.waitFor("the other outcomes", func() bool { return rn.r.Stats().Delivered == 9 && rn.r.Stats().Unrecorded == 1 })
	later := msg("orders", "later", 99)
	e.enqueue(later)
	rn.settle()
	if e.get(later.ID) != nil {
		t.Fatal("the relay stopped delivering after a poison outcome")
	}
	if logs := e.logs.find("the store refused to record an outcome"); len(logs) != 1 || logs[0].attrs["message_id"] != poison.ID.String() {
		t.Fatalf("operations log = %+v", logs)
	}
}

// unavailableFor is a store whose calls recording outcomes fail as
// unavailable (a killed connection) the first n times, while its empty
// calls succeed (another connection of the pool answers).
type unavailableFor struct {
	store.Store
	mu sync.Mutex
	n  int
}

func (s *unavailableFor) ProcessBatch(ctx context.Context, b *store.Batch) (*store.Result, error) {
	s.mu.Lock()
	fail := len(b.Completions) > 0 && s.n > 0
	if fail {
		s.n--
	}
	s.mu.Unlock()
	if fail {
		return nil, fmt.Errorf("process batch: %w: FATAL: terminating connection due to administrator command (SQLSTATE 57P01)", store.ErrUnavailable)
	}
	return s.Store.ProcessBatch(ctx, b)
}

// TestOutcomeIsKeptWhileTheStoreIsUnavailable: recording a delivery fails
// because its connection was killed, while the probe call on another
// connection succeeds. The outcome is kept and recorded later, not dropped
// as one the store refused (which sent the message again once its lease
// lapsed).
func TestOutcomeIsKeptWhileTheStoreIsUnavailable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withOrdering(outbox.OrderingNone))
	m := msg("orders", "a", 1)
	e.enqueue(m)
	rec := &recorder{}
	r, err := New(&unavailableFor{Store: e.s, n: 3}, e.config(map[string]Destination{"orders": {Transport: rec.transport()}}))
	if err != nil {
		t.Fatal(err)
	}
	rn := e.run(r)
	rn.waitFor("the delivery recorded", func() bool {
		e.clk.Advance(time.Second) // the recorder's back-off between tries
		return rn.r.Stats().Delivered == 1
	})
	if st := rn.r.Stats(); st.Unrecorded != 0 || len(rec.got()) != 1 || e.get(m.ID) != nil {
		t.Fatalf("unrecorded %d, deliveries %d, row left %v: want the outcome kept and recorded once the store answers",
			st.Unrecorded, len(rec.got()), e.get(m.ID) != nil)
	}
}
