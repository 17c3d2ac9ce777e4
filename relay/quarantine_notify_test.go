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
	if _, err := e.s.DB().ExecContext(e.ctx, `INSERT INTO `+e.s.Config().TablePrefix+`outbox
		(destination, type, payload, attempts) VALUES ('d', 'test.event', 'x', 'x')`); err != nil {
		t.Fatal(err)
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
	if es := e.deadLetters(); len(es) != 1 {
		t.Fatalf("dead letters %d, want the undecodable row", len(es))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(added) != 1 || len(thresholds) != 1 {
		t.Errorf("DeadLetters heard of %d entries and %d threshold crossings, want 1 and 1 (the quarantined row)", len(added), len(thresholds))
	}
	if n := rn.r.Stats().DeadLettered; n != 1 {
		t.Errorf("Stats().DeadLettered = %d, want 1", n)
	}
}
