package postgres

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

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
		if b, out := planBuffers(t, s.pool, q, args...); b > 20 {
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
	if b, out := planBuffers(t, s.pool, s.scheduledBacklogSQL(), nil); b > 20 {
		t.Errorf("the scheduled backlog behind 30,000 ready messages read %d buffers; want a handful: %s", b, out)
	}
}

// The counts of failed messages by reason (GET /v1/stats) read the failed
// messages through their index. The planner has no statistics of the
// failure bit and took its test for one nearly every row matches: behind
// 5,000,000 ready messages, none failed, it read the whole outbox in
// parallel, 1.0 s a call. At this test's size the planner picks the index
// by itself; the test checks the plan FailureReasons runs under, which
// holds at any size.
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
	// Costed as a table of millions of rows makes the planner cost them
	// (a random read dear against a sequential one): on its own the plan
	// reads the whole outbox, as it did at 5,000,000 rows; FailureReasons'
	// settings keep it on the index.
	for _, byIndex := range []bool{false, true} {
		plan := failureReasonsPlan(t, s, byIndex)
		onIndex := strings.Contains(plan, "outbox_failed_idx") && !strings.Contains(plan, "Seq Scan")
		if onIndex != byIndex {
			t.Errorf("settings %v: FailureReasons' plan reads the index: %v, want %v:\n%s", byIndex, onIndex, byIndex, plan)
		}
	}
}

// failureReasonsPlan is FailureReasons' plan with random reads dear, and
// its settings (byIndexSQL) when byIndex.
func failureReasonsPlan(t *testing.T, s *Store, byIndex bool) string {
	t.Helper()
	ctx := context.Background()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if byIndex {
		if _, err := tx.Exec(ctx, byIndexSQL); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tx.Exec(ctx, `SELECT set_config('random_page_cost', '1000', true)`); err != nil {
		t.Fatal(err)
	}
	rows, err := tx.Query(ctx, `EXPLAIN `+s.failureReasonsSQL())
	if err != nil {
		t.Fatal(err)
	}
	var plan string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan += line + "\n"
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return plan
}

// planBuffers runs q through db under EXPLAIN (ANALYZE, BUFFERS) and
// returns the buffers it visited (each index entry and row it read is a
// buffer visit), and the plan.
func planBuffers(t *testing.T, db interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, q string, args ...any) (int64, string) {
	t.Helper()
	var out []byte
	if err := db.QueryRow(context.Background(), `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) `+q, args...).Scan(&out); err != nil {
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
