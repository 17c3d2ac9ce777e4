package sqlite

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/store"
)

// TestListByStatusUsesItsIndex checks that a page of the dead-letter list
// filtered by status is read through the status index: with 20,000
// pending entries and a handful resolved, listing the resolved ones (the
// dashboard's and the CLI's --status filter) walked the time index over
// every pending entry, holding the connection it read on.
func TestListByStatusUsesItsIndex(t *testing.T) {
	s, _ := openTemp(t, store.Config{})
	ctx := context.Background()
	loadUnrelatedEntries(t, s, 20_000, time.Now().Add(-time.Hour))
	if _, err := s.w.Exec(s.sql(`UPDATE {{prefix}}dead_letters SET status = 'resolved', resolved_at = 1
		WHERE id IN ('u-19995', 'u-19996', 'u-19997', 'u-19998', 'u-19999')`)); err != nil {
		t.Fatal(err)
	}
	for _, status := range []dlq.Status{dlq.StatusResolved, dlq.StatusReplayed} {
		f := &dlq.Filters{Status: status, Limit: 100}
		tail, args, err := s.entryFilter(ctx, s.r, f, false)
		if err != nil {
			t.Fatal(err)
		}
		plan := queryPlan(t, s, s.sql(`SELECT id FROM {{prefix}}dead_letters`+tail), args...)
		if joined := strings.Join(plan, "; "); !strings.Contains(joined, "dead_letters_status") {
			t.Errorf("list by status %s: the plan does not use the status index: %s", status, joined)
		}
	}
	es, err := s.DLQ().List(ctx, &dlq.Filters{Status: dlq.StatusResolved, Limit: 100})
	if err != nil || len(es) != 5 {
		t.Fatalf("List resolved = %d entries, %v; want 5", len(es), err)
	}
}
