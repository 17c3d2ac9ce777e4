package store_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/errorhandling"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// The explanation counts in words that fit the number: "1 later message
// waits", "after 1 attempt", "2 later messages wait".
func TestDescribeStreamCountsInWords(t *testing.T) {
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	dead := &outbox.Message{ID: uuid.New(), Attempts: 1, DeadLetteredAt: now.Add(-time.Minute), FailureReason: errorhandling.ReasonHandlerException, Error: "no"}
	retrying := &outbox.Message{ID: uuid.New(), Attempts: 1, ScheduledFor: now.Add(time.Minute), Status: outbox.StatusFailed, Error: "503"}
	for _, c := range []struct {
		head  *outbox.Message
		later int
		want  []string
	}{
		{dead, 1, []string{"after 1 attempt (", "; 1 later message waits behind it"}},
		{dead, 2, []string{"; 2 later messages wait behind it"}},
		{retrying, 1, []string{"failed 1 time (", "1 later message waits behind it"}},
	} {
		var st store.StreamStatus
		store.DescribeStream(&st, store.StreamHead{Message: c.head, Ordering: outbox.OrderingStrict, Later: c.later}, now)
		for _, w := range c.want {
			if !strings.Contains(st.Why, w) {
				t.Errorf("Why = %q, want it to say %q", st.Why, w)
			}
		}
	}
	var st store.StreamStatus
	store.DescribeStream(&st, store.StreamHead{Message: retrying, Ordering: outbox.OrderingRelease, Later: 1}, now)
	if !strings.Contains(st.Why, "; 1 later message is not held back") {
		t.Errorf("Why = %q", st.Why)
	}
}

// A head whose last try failed for its destination (no reason recorded,
// no attempt charged) is explained without a FailureReason(0) and without
// "it failed 0 times".
func TestDescribeStreamUnchargedFault(t *testing.T) {
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	due := &outbox.Message{ID: uuid.New(), Error: "webhook: context deadline exceeded"}
	var st store.StreamStatus
	store.DescribeStream(&st, store.StreamHead{Message: due, Ordering: outbox.OrderingStrict, Later: 1}, now)
	if strings.Contains(st.Why, "FailureReason(") || strings.Contains(st.Why, "0 times") ||
		!strings.Contains(st.Why, "(its last try failed, not charged: webhook: context deadline exceeded)") {
		t.Errorf("Why = %q", st.Why)
	}
	retrying := &outbox.Message{ID: uuid.New(), Attempts: 2, ScheduledFor: now.Add(time.Minute), Status: outbox.StatusFailed, Error: "503"}
	store.DescribeStream(&st, store.StreamHead{Message: retrying, Ordering: outbox.OrderingStrict, Later: 1}, now)
	if strings.Contains(st.Why, "FailureReason(") || !strings.Contains(st.Why, "failed 2 times (503)") {
		t.Errorf("Why = %q", st.Why)
	}
}
