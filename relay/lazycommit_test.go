package relay

import (
	"testing"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/outbox"
)

// TestLazyCommitOnlyWithoutOrderedRenewals: a claim call may commit
// without waiting for the disk (store.Batch.LazyCommit) only while none of
// the leases it renews is of a message of an ordered stream; one the
// relay no longer holds counts as ordered.
func TestLazyCommitOnlyWithoutOrderedRenewals(t *testing.T) {
	fs := newFlights()
	plain := &outbox.Message{ID: uuid.New(), Destination: "d"}
	none := &outbox.Message{ID: uuid.New(), Destination: "d", Stream: "s", Ordering: outbox.OrderingNone}
	strict := &outbox.Message{ID: uuid.New(), Destination: "d", Stream: "s"}
	for _, m := range []*outbox.Message{plain, none, strict} {
		fs.mu.Lock()
		fs.add(&flight{m: m})
		fs.mu.Unlock()
	}
	for _, c := range []struct {
		ids  []uuid.UUID
		want bool
	}{
		{nil, false},
		{[]uuid.UUID{plain.ID, none.ID}, false},
		{[]uuid.UUID{plain.ID, strict.ID}, true},
		{[]uuid.UUID{uuid.New()}, true},
	} {
		if got := fs.anyOrdered(c.ids); got != c.want {
			t.Errorf("anyOrdered(%v) = %v, want %v", c.ids, got, c.want)
		}
	}
}
