package postgres

import (
	"context"
	"strings"
	"testing"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/store"
)

// TestListFiltersUseTheirIndexes checks that a page of the dead-letter
// list filtered by status or by reason is read through an index in the
// list's order, found with statistics that know the table: with 20,000
// pending entries and a handful resolved, listing the resolved ones (the
// dashboard's and the CLI's --status filter) walked the time index over
// every pending entry; a rare reason (the last five entries) the same.
func TestListFiltersUseTheirIndexes(t *testing.T) {
	s, err := openTest(t, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, q := range []string{
		`INSERT INTO ` + s.n.deadLetters + ` (id, message_id, destination, type, reason, failure_time)
			SELECT 'e' || lpad(g::text, 6, '0'), gen_random_uuid()::text, 'd', 'e', CASE WHEN g > 19995 THEN 4 ELSE 1 END, now() + g * interval '1 ms'
			FROM generate_series(1, 20000) g`,
		`UPDATE ` + s.n.deadLetters + ` SET status = 'resolved', resolved_at = now() WHERE id <= 'e000005'`,
		`ANALYZE ` + s.n.deadLetters,
	} {
		if _, err := s.pool.Exec(ctx, q); err != nil {
			t.Fatalf("load: %v", err)
		}
	}
	timeout := errorhandling.ReasonTimeoutExceeded
	for _, c := range []struct {
		name  string
		f     *dlq.Filters
		index string
	}{
		{"resolved", &dlq.Filters{Status: dlq.StatusResolved, Limit: 100}, "dead_letters_status_idx"},
		{"replayed", &dlq.Filters{Status: dlq.StatusReplayed, Limit: 100}, "dead_letters_status_idx"},
		{"reason", &dlq.Filters{Reason: &timeout, Limit: 100}, "dead_letters_reason_idx"},
		{"message", &dlq.Filters{MessageID: "m", Status: dlq.StatusPending, Limit: 1}, "dead_letters_message_idx"},
	} {
		where, args := filterSQL(c.f)
		_, raw := explainJSON(t, s, s.dlq.listSQL(where, c.f, false), args...)
		if !strings.Contains(raw, s.n.prefix+c.index) {
			t.Errorf("list by %s: the plan does not use %s:\n%s", c.name, c.index, raw)
		}
	}
	es, err := s.dlq.List(ctx, &dlq.Filters{Status: dlq.StatusResolved, Limit: 100})
	if err != nil || len(es) != 5 {
		t.Fatalf("List resolved = %d entries, %v; want 5", len(es), err)
	}
}
