package sqlite

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/store"
)

// A list of the messages in one state reads those messages: the retrying
// list walked outbox_claim, every live message, reading each row for its
// status, and the dead-lettered and leased lists walked the table, until
// they had a page (the dashboard's messages page and `backstop messages
// list --state` ask them).
func TestListByStateReadsOnlyThatState(t *testing.T) {
	s, _ := openTemp(t, store.Config{})
	ctx := context.Background()
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := s.w.Exec(s.sql(q), args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	later := time.Now().Add(time.Hour).UnixMilli()
	exec(`WITH RECURSIVE g(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM g WHERE i + 1 < 20000)
		INSERT INTO {{prefix}}outbox (destination, type, payload) SELECT 'd', 'e', '{"n":1}' FROM g`)
	exec(`INSERT INTO {{prefix}}outbox (destination, type, status, attempts, scheduled_for) VALUES ('d', 'retry', 1 | 32768, 1, ?)`, later)
	exec(`INSERT INTO {{prefix}}outbox (destination, type, status, attempts, dead_lettered_at) VALUES ('d', 'dead', 1 | 32768, 3, ?)`, later)
	exec(`INSERT INTO {{prefix}}outbox (destination, type, instance_id, lease_expiry) VALUES ('d', 'leased', 'other', ?)`, later)
	exec(`ANALYZE`)
	for state, index := range map[store.MessageState]string{
		store.StateRetrying:     "outbox_retrying",
		store.StateDeadLettered: "outbox_dead_seq",
		store.StateLeased:       "outbox_lease",
	} {
		f := store.MessageFilter{State: state, OmitPayload: true}
		got, err := s.ListMessages(ctx, f)
		if err != nil || len(got) != 1 {
			t.Fatalf("%s: %d messages (%v), want 1", state, len(got), err)
		}
		q, args, err := s.listMessagesSQL(f, s.now().UnixMilli())
		if err != nil {
			t.Fatal(err)
		}
		plan := queryPlan(t, s, q, args...)
		if joined := strings.Join(plan, "; "); !strings.Contains(joined, index) {
			t.Errorf("a page of %s does not read %s: %s", state, index, joined)
		}
	}
}
