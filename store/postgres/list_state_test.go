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
		if b, out := planBuffers(t, s, q, args...); b > 20 {
			t.Errorf("a page of %s behind 30,000 ready messages read %d buffers; want a handful: %s", state, b, out)
		}
	}
}

// The scheduled backlog (GET /v1/stats, polled by the dashboard) reads the
// messages scheduled for later, not the outbox: its one condition matched
// no index, and behind 5,000,000 ready messages it read the whole table in
// parallel, 1.1 s a call (401 buffers behind 30,000 here). A leased
// message scheduled for later counts as before.
func TestScheduledBacklogReadsOnlyTheScheduled(t *testing.T) {
	ctx := context.Background()
	s, err := openTest(t, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	backlog{Pending: 30000, Scheduled: 2}.load(t, s)
	if err := execPoison(t, s, `UPDATE {prefix}outbox SET instance_id = 'other', lease_expiry = now() + interval '1 minute'
		WHERE seq = (SELECT max(seq) FROM {prefix}outbox)`); err != nil {
		t.Fatal(err)
	}
	b, err := s.ScheduledBacklog(ctx)
	if err != nil || b.Count != 2 || b.Next.IsZero() {
		t.Fatalf("ScheduledBacklog %+v (%v), want the 2 retries", b, err)
	}
	if b, out := planBuffers(t, s, s.scheduledBacklogSQL(), nil); b > 20 {
		t.Errorf("the scheduled backlog behind 30,000 ready messages read %d buffers; want a handful: %s", b, out)
	}
}

// The counts of failed messages by reason (GET /v1/stats) read the failed
// messages. The planner took the failure bit's test for one nearly every
// row matches (the bit has no statistics of its own), and behind 5,000,000
// ready messages it read the whole outbox, 1.0 s a call; the same bit as a
// range of status is estimated from the column's statistics. The test
// checks the estimate, which is what picks the plan at that size: a table
// large enough to flip the plan takes too long to load here.
func TestFailureReasonsReadOnlyTheFailed(t *testing.T) {
	ctx := context.Background()
	s, err := openTest(t, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	backlog{Pending: 30000, Scheduled: 2}.load(t, s)
	got, err := s.FailureReasons(ctx)
	if err != nil || len(got) != 1 || got[0].Count != 2 {
		t.Fatalf("FailureReasons %+v (%v), want the 2 retries", got, err)
	}
	var out []byte
	if err := s.pool.QueryRow(ctx, `EXPLAIN (FORMAT JSON) SELECT 1 FROM `+s.n.outbox+` WHERE `+failedWhere).Scan(&out); err != nil {
		t.Fatal(err)
	}
	var plan []struct {
		Plan struct {
			Rows float64 `json:"Plan Rows"`
		}
	}
	if err := json.Unmarshal(out, &plan); err != nil || len(plan) != 1 {
		t.Fatalf("plan %s: %v", out, err)
	}
	if r := plan[0].Plan.Rows; r > 300 {
		t.Errorf("the planner expects %.0f failed messages of 30,002, 2 of them failed: %s", r, out)
	}
	if b, out := planBuffers(t, s, s.failureReasonsSQL()); b > 20 {
		t.Errorf("the failure reasons behind 30,000 ready messages read %d buffers; want a handful: %s", b, out)
	}
}

// planBuffers runs q under EXPLAIN (ANALYZE, BUFFERS) and returns the
// buffers it visited, and the plan.
func planBuffers(t *testing.T, s *Store, q string, args ...any) (int64, string) {
	t.Helper()
	var out []byte
	if err := s.pool.QueryRow(context.Background(), `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) `+q, args...).Scan(&out); err != nil {
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
	return plan[0].Plan.Hit + plan[0].Plan.Read, string(out)
}
