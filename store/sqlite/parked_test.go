package sqlite

import (
	"context"
	"testing"
	"time"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// TestClaimCostDoesNotGrowWithParkedMessages: a claim of 100 from a stream
// with 10,000 dead letters of ordering release before its live messages
// costs about what it costs from a stream without them (migration 0014).
// The stream read walked every one of them, inside the write transaction:
// ~0.4 s a claim at 200,000. The fastest of several claims is compared,
// so that a busy machine does not decide the outcome.
func TestClaimCostDoesNotGrowWithParkedMessages(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 12,000 rows")
	}
	const parkedRows = 10_000
	s, _ := openTemp(t, store.Config{})
	exec := func(q string, args ...any) {
		if _, err := s.w.Exec(s.sql(q), args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// n messages of ordering release to stream s of dest, dead-lettered
	// when dead is not 0.
	write := func(dest string, n int, dead int64) {
		exec(`WITH RECURSIVE g(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM g WHERE i + 1 < ?1)
INSERT INTO {{prefix}}outbox (destination, stream, type, payload, ordering, dead_lettered_at, status, attempts)
SELECT ?2, 's', 'bench.event', '{"n":1}', 'release', nullif(?3, 0), CASE WHEN ?3 = 0 THEN 1 ELSE 32769 END,
  CASE WHEN ?3 = 0 THEN 0 ELSE 5 END FROM g`, n, dest, dead)
	}
	write("parked", parkedRows, 1)
	write("parked", 1_000, 0)
	write("bench", 1_000, 0)
	exec(`ANALYZE`)
	fastest := func(dest string) time.Duration {
		ctx := context.Background()
		b := &store.Batch{Instance: store.Instance{ID: "i"}, Claim: store.ClaimRequest{Limit: 100, Destinations: []string{dest}}}
		best := time.Hour
		for range 7 {
			t0 := time.Now()
			r, err := s.ProcessBatch(ctx, b)
			best = min(best, time.Since(t0))
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Claimed) != 100 {
				t.Fatalf("%s: claimed %d, want 100", dest, len(r.Claimed))
			}
			b.Completions = b.Completions[:0]
			for _, m := range r.Claimed {
				b.Completions = append(b.Completions, store.Completion{ID: m.ID, Status: outbox.StatusPublished})
			}
		}
		return best
	}
	base, parked := fastest("bench"), fastest("parked")
	t.Logf("fastest claim of 100: %s without parked messages, %s past 10,000", base, parked)
	if parked > base*3/2+20*time.Millisecond {
		t.Errorf("a claim past 10,000 parked messages took %s, against %s without them", parked, base)
	}
}
