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
	plan, err := s.explainClaim(ctx, 100, true)
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
