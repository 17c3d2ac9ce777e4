package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// backlog describes rows bulk-loaded for plan tests and benchmarks.
type backlog struct {
	// Pending rows are due now; they go round-robin over Streams streams
	// (0: no stream).
	Pending, Streams int
	// Scheduled rows wait for a retry an hour away.
	Scheduled int
}

// load bulk-loads b with COPY and ANALYZEs the outbox.
func (b backlog) load(t testing.TB, s *Store) {
	t.Helper()
	b.loadFrom(t, s, 0)
	if _, err := s.pool.Exec(context.Background(), "ANALYZE "+s.n.outbox); err != nil {
		t.Fatalf("analyze: %v", err)
	}
}

// loadFrom bulk-loads b with COPY, numbering its rows from first (which
// picks their streams).
func (b backlog) loadFrom(t testing.TB, s *Store, first int) {
	t.Helper()
	ctx := context.Background()
	later := time.Now().Add(time.Hour)
	n := b.Pending + b.Scheduled
	i := 0
	src := pgx.CopyFromFunc(func() ([]any, error) {
		if i >= n {
			return nil, nil
		}
		stream := ""
		if b.Streams > 0 {
			stream = fmt.Sprintf("s%d", (first+i)%b.Streams)
		}
		var sched *time.Time
		status, attempts := int32(outbox.StatusStored), int32(0)
		if i >= b.Pending {
			sched, status, attempts = &later, int32(outbox.StatusStored|outbox.StatusFailed), 1
			stream = "" // a waiting retry in a stream would hold the stream
		}
		i++
		return []any{"bench", stream, "bench.event", []byte(`{"n":1}`), sched, status, attempts}, nil
	})
	cols := []string{"destination", "stream", "type", "payload", "scheduled_for", "status", "attempts"}
	table := pgx.Identifier{s.n.prefix + "outbox"}
	if s.n.schema != "" {
		table = pgx.Identifier{s.n.schema, s.n.prefix + "outbox"}
	}
	if _, err := s.pool.CopyFrom(ctx, table, cols, src); err != nil {
		t.Fatalf("copy: %v", err)
	}
}

func TestClaimPlanReadsHeadsAndPartialIndexes(t *testing.T) {
	s, err := openTest(t, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	backlog{Pending: 5000, Streams: 500, Scheduled: 3000}.load(t, s)
	backlog{Pending: 2000}.loadFrom(t, s, 0) // unordered
	if _, err := s.pool.Exec(context.Background(), "ANALYZE "+s.n.outbox); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	plan, err := s.explainClaim(ctx, store.ClaimRequest{Limit: 100}, true)
	if err != nil {
		t.Fatalf("explain: %v", err)
	}
	if strings.Contains(plan, "auto_explain could not be loaded") {
		t.Skip("auto_explain is not available to this user")
	}
	for _, idx := range []string{"backstop_streams_ready_idx", "backstop_outbox_stream_idx",
		"backstop_outbox_unordered_idx", "backstop_outbox_unordered_due_idx", "backstop_outbox_lease_idx"} {
		if !strings.Contains(plan, idx) {
			t.Errorf("claim plan does not use %s:\n%s", idx, plan)
		}
	}
	if strings.Contains(plan, "Seq Scan on backstop_outbox") {
		t.Errorf("claim plan scans the outbox:\n%s", plan)
	}
	if strings.Contains(plan, "JIT:") {
		t.Errorf("claim plan uses JIT:\n%s", plan)
	}
	if testing.Verbose() {
		t.Logf("EXPLAIN (ANALYZE, BUFFERS) of the claim, 5000 pending in 500 streams, 2000 unordered, 3000 waiting retries:\n%s", plan)
	}
}

// TestClaimPassesOverLapsedLeasesOfDeletedRows: every message delivered
// leaves its lease's entry in outbox_lease_idx behind, whose row the
// recording deleted; once the lease duration has passed they all read as
// lapsed leases until a vacuum removes them. A bitmap scan never marks
// them dead, so each claim walked every one (a claim of one message
// behind 50,000 took 10 ms, and insert-and-work over 120 s fell from 27k
// to 9.8k msgs/s); and a claim naming its destinations ran
// claim_destinations, with its own walk of them, and dropped its rows.
// The claim reads lapsed leases with index scans, which mark what they
// find dead, and a claim naming up to 16 destinations never runs
// claim_destinations.
func TestClaimPassesOverLapsedLeasesOfDeletedRows(t *testing.T) {
	s, err := openTest(t, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	backlog{Pending: 20000}.load(t, s)
	for _, q := range []string{
		"UPDATE " + s.n.outbox + " SET instance_id = 'gone', lease_expiry = now() - interval '1 minute'",
		"DELETE FROM " + s.n.outbox,
	} {
		if _, err := s.pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := s.Enqueue(ctx, &outbox.Message{Destination: "bench", Type: "t"}); err != nil {
		t.Fatal(err)
	}
	plan, err := s.explainClaim(ctx, store.ClaimRequest{Limit: 100, Destinations: []string{"bench"}}, true)
	if err != nil {
		t.Fatalf("explain: %v", err)
	}
	if strings.Contains(plan, "auto_explain could not be loaded") {
		t.Skip("auto_explain is not available to this user")
	}
	if strings.Contains(plan, "Bitmap") {
		t.Errorf("the claim reads an index as a bitmap, which never marks the entries of dead rows:\n%s", plan)
	}
	if !strings.Contains(plan, "Index Scan using backstop_outbox_lease_idx") {
		t.Errorf("the claim does not read lapsed leases through outbox_lease_idx:\n%s", plan)
	}
	// The destinations' loop: each of its scans of the outbox (those of
	// claim_destinations) must never have run.
	for _, stmt := range strings.Split(plan, "-- a statement of the claim function") {
		if !strings.Contains(stmt, "SELECT d.destination FROM") {
			continue
		}
		for _, line := range strings.Split(stmt, "\n") {
			if strings.Contains(line, "on backstop_outbox") && !strings.Contains(line, "never executed") {
				t.Errorf("a claim naming its destination read the outbox for claim_destinations: %s\n%s", strings.TrimSpace(line), stmt)
			}
		}
	}
}
