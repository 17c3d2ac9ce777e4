package relay

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/backstophq/backstop/store"
)

// TestFleetOpsKeepOneCallPerDestinationAndKind: while the store is out of
// reach, a destination that keeps failing and recovering queues a circuit
// call at each change and a pause at each Retry-After. The queue keeps
// one call of each kind for each destination, the last circuit call and
// the longest pause, and a call put back after a failed sync does not
// undo one queued since.
func TestFleetOpsKeepOneCallPerDestinationAndKind(t *testing.T) {
	var q fleetOps
	var made []string
	op := func(kind, dest, what string, pause time.Duration) fleetOp {
		return fleetOp{key: kind + "\x00" + dest, pause: pause, call: func(context.Context, store.Fleet) error {
			made = append(made, dest+" "+what)
			return nil
		}}
	}
	for i := range 10_000 {
		for _, d := range []string{"a", "b"} {
			what := "open"
			if i%2 == 1 {
				what = "close"
			}
			q.add(op("circuit", d, fmt.Sprintf("%s %d", what, i), 0))
			q.add(op("pause", d, fmt.Sprintf("pause %d", i%7), time.Duration(i%7)*time.Second))
		}
	}
	if n := q.len(); n != 4 {
		t.Fatalf("%d calls queued for two destinations, want 4", n)
	}
	ops := q.take()
	// the sync fails at once: everything is put back, after which b's
	// circuit changes again
	q.add(op("circuit", "b", "open 10000", 0))
	q.putBack(ops)
	for _, o := range q.take() {
		if err := o.call(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]bool{"a close 9999": true, "a pause 6": true, "b pause 6": true, "b open 10000": true}
	if len(made) != len(want) {
		t.Fatalf("made %q, want %v", made, want)
	}
	for _, m := range made {
		if !want[m] {
			t.Fatalf("made %q, want %v", made, want)
		}
	}
}
