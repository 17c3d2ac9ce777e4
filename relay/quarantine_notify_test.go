package relay

import (
	"sync"
	"testing"

	"github.com/backstophq/backstop/dlq"
)

// A row the claim cannot decode is dead-lettered by the store in the
// relay's claim (Result.Quarantined): it is a dead letter of the relay's
// like any other, so Config.DeadLetters hears of it (OnEntryAdded,
// OnThresholdReached) and Stats counts it. Before, the relay never read
// Result.Quarantined: a producer in another language writing rows of the
// wrong type filled the dead-letter queue with no alert, no hook and no
// dead_lettered_total, only an ERROR line in the store's log.
func TestQuarantinedRowIsADeadLetterOfTheRelay(t *testing.T) {
	e := newEnv(t)
	// Rows written before the checks existed (README: "Rows that break a
	// check but were written before the check existed ... the next batch
	// finds them and dead-letters each").
	for _, trig := range []string{"outbox_check_attempts_insert"} {
		if _, err := e.s.DB().ExecContext(e.ctx, `DROP TRIGGER `+e.s.Config().TablePrefix+trig); err != nil {
			t.Fatal(err)
		}
	}
	// More than a claim reads back (quarantineReadBack): the rest are
	// told too, with what the relay knows.
	const bad = quarantineReadBack + 4
	for range bad {
		if _, err := e.s.DB().ExecContext(e.ctx, `INSERT INTO `+e.s.Config().TablePrefix+`outbox
			(destination, type, payload, attempts) VALUES ('d', 'test.event', 'x', 'x')`); err != nil {
			t.Fatal(err)
		}
	}
	e.enqueue(msg("d", "", 1))

	mgr := dlq.NewManager(e.s.DLQ(), 1)
	var mu sync.Mutex
	var added []*dlq.Entry
	var thresholds []int
	mgr.OnEntryAdded(func(en *dlq.Entry) { mu.Lock(); added = append(added, en); mu.Unlock() })
	mgr.OnThresholdReached(func(n int) { mu.Lock(); thresholds = append(thresholds, n); mu.Unlock() })

	rec := &recorder{}
	cfg := e.config(map[string]Destination{"d": {Transport: rec.transport()}})
	cfg.DeadLetters = mgr
	rn := e.start(cfg)
	rn.settle()

	if got := rec.got(); len(got) != 1 {
		t.Fatalf("deliveries %v, want the good message", got)
	}
	if es := e.deadLetters(); len(es) != bad {
		t.Fatalf("dead letters %d, want the %d undecodable rows", len(es), bad)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(added) != bad || len(thresholds) != 1 {
		t.Fatalf("DeadLetters heard of %d entries and %d threshold crossings, want %d and 1 (the quarantined rows)", len(added), len(thresholds), bad)
	}
	if en := added[0]; en.Destination != "d" || en.MessageID == "" || en.Reason.String() != "SerializationError" {
		t.Errorf("the first entry told: destination %q, message %q, reason %s; want the row's, read back", en.Destination, en.MessageID, en.Reason)
	}
	if n := rn.r.Stats().DeadLettered; n != bad {
		t.Errorf("Stats().DeadLettered = %d, want %d", n, bad)
	}
}
