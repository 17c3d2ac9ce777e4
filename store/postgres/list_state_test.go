package postgres

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/backstophq/backstop/store"
)

// A list of the messages in one state reads those messages, not the
// outbox: the retrying and dead-lettered lists walked the outbox's key in
// seq order and read every row until they had a page, so on a backlog of
// 5,000,000 ready messages, with none retrying, one page of "retrying"
// took 5.4 s and 104,594 buffers (the dashboard's messages page and
// `backstop messages list --state` ask it), and one of dead letters a
// parallel read of the whole table, 1.1 s.
func TestListByStateReadsOnlyThatState(t *testing.T) {
	ctx := context.Background()
	s, err := openTest(t, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	backlog{Pending: 30000}.load(t, s)
	backlog{Scheduled: 1}.loadFrom(t, s, 0) // one retry, at the end
	if err := execPoison(t, s, `INSERT INTO {prefix}outbox (destination, type, attempts, status, dead_lettered_at, failure_reason)
		VALUES ('bench', 'dead', 1, 1, now(), 1)`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, "ANALYZE "+s.n.outbox); err != nil {
		t.Fatal(err)
	}
	for _, state := range []store.MessageState{store.StateRetrying, store.StateDeadLettered} {
		f := store.MessageFilter{State: state, OmitPayload: true}
		got, err := s.ListMessages(ctx, f)
		if err != nil || len(got) != 1 {
			t.Fatalf("%s: %d messages (%v), want 1", state, len(got), err)
		}
		q, args, err := s.listMessagesSQL(f)
		if err != nil {
			t.Fatal(err)
		}
		var out []byte
		if err := s.pool.QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) `+q, args...).Scan(&out); err != nil {
			t.Fatal(err)
		}
		var plan []struct {
			Plan struct {
				Hit  int64 `json:"Shared Hit Blocks"`
				Read int64 `json:"Shared Read Blocks"`
			}
		}
		if err := json.Unmarshal(out, &plan); err != nil || len(plan) != 1 {
			t.Fatalf("plan %s: %v", out, err)
		}
		if b := plan[0].Plan.Hit + plan[0].Plan.Read; b > 20 {
			t.Errorf("a page of %s behind 30,000 ready messages read %d buffers; want a handful: %s", state, b, out)
		}
	}
}
