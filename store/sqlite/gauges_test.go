package sqlite

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/store"
)

// loadGaugeBacklog loads, per 200 rows: 150 fresh messages (half
// unordered, half in strict streams), 40 in strict streams of 4 whose head
// failed and waits an hour for its retry (1 to 6 attempts), 9 unordered
// failed messages waiting likewise, 1 dead-lettered with its pending entry
// and a message behind it, and a leased message every 400. Failed rows
// carry a 1 KB payload, the others a few bytes.
func loadGaugeBacklog(t *testing.T, s *Store, rows int) {
	t.Helper()
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := s.w.Exec(s.sql(q), args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	now := time.Now()
	later := now.Add(time.Hour).UnixMilli()
	series := `WITH RECURSIVE g(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM g WHERE i + 1 < ?) `
	fresh, heads, loose, dead := rows*150/200, rows*40/200/4, rows*9/200, rows/200
	exec(series+`INSERT INTO {{prefix}}outbox (destination, stream, type, payload)
		SELECT 'd', CASE WHEN i % 2 = 0 THEN '' ELSE 's' || (i % 5000) END, 'e', '{"n":1}' FROM g`, fresh)
	exec(series+`INSERT INTO {{prefix}}outbox (destination, stream, type, payload, status, attempts, scheduled_for)
		SELECT 'd', 'f' || (i / 4), 'e',
			CASE WHEN i % 4 = 0 THEN zeroblob(1000) ELSE '{"n":1}' END,
			CASE WHEN i % 4 = 0 THEN 1 | 32768 ELSE 1 END,
			CASE WHEN i % 4 = 0 THEN 1 + (i / 4) % 6 ELSE 0 END,
			CASE WHEN i % 4 = 0 THEN ? END
		FROM g ORDER BY i`, heads*4, later)
	exec(series+`INSERT INTO {{prefix}}outbox (destination, stream, type, payload, status, attempts, scheduled_for)
		SELECT 'd', '', 'e', zeroblob(1000), 1 | 32768, 1 + i % 6, ? FROM g`, loose, later)
	exec(series+`INSERT INTO {{prefix}}outbox (destination, stream, type, payload, status, attempts, dead_lettered_at)
		SELECT 'd', 'x' || i, 'e', zeroblob(1000), 1 | 32768, 3, ? - i * 1000 FROM g`, dead, now.UnixMilli())
	exec(series+`INSERT INTO {{prefix}}outbox (destination, stream, type, payload)
		SELECT 'd', 'x' || i, 'e', '{"n":1}' FROM g`, dead)
	exec(`INSERT INTO {{prefix}}dead_letters (id, message_id, destination, stream, type, payload, seq, failure_time, attempts)
		SELECT id, id, destination, stream, type, payload, seq, dead_lettered_at, attempts
		FROM {{prefix}}outbox WHERE dead_lettered_at IS NOT NULL`)
	exec(`UPDATE {{prefix}}outbox SET instance_id = 'other', lease_expiry = ?
		WHERE (seq / 2) % 200 = 4 AND stream = '' AND status = 1`, later)
	exec(`ANALYZE`)
}

// TestGaugesPlan loads a backlog (20,000 rows; BACKSTOP_GAUGES_ROWS sets
// another size, 200000 for the figures in docs/operating.md), checks that
// Gauges agrees with the monitoring queries and that its plan reads the
// outbox through indexes only (no full scan), and logs the plan and the
// time of Gauges next to that of the five calls it replaces.
func TestGaugesPlan(t *testing.T) {
	t.Parallel()
	rows := 20000
	if v := os.Getenv("BACKSTOP_GAUGES_ROWS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 200 {
			t.Fatalf("BACKSTOP_GAUGES_ROWS = %q: want a number of rows, at least 200", v)
		}
		rows = n
	}
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "gauges.db"), store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	start := time.Now()
	loadGaugeBacklog(t, s, rows)
	t.Logf("loaded %d rows in %v", rows, time.Since(start).Round(time.Millisecond))

	const minAttempts = 3
	g, err := s.Gauges(ctx, minAttempts)
	if err != nil {
		t.Fatal(err)
	}
	heads, loose, dead := rows*40/200/4, rows*9/200, rows/200
	if g.DLQPending != dead || g.Scheduled != heads+loose || g.BlockedStreams != heads+dead || g.Leased == 0 {
		t.Fatalf("Gauges = %+v; want %d pending dead letters, %d scheduled, %d blocked streams, some leased",
			g, dead, heads+loose, heads+dead)
	}
	var blockedTime, poisonTime time.Duration
	old := func() {
		depth, err := s.DLQ().Count(ctx)
		if err != nil {
			t.Fatal(err)
		}
		es, err := s.DLQ().List(ctx, &dlq.Filters{Status: dlq.StatusPending, Limit: 1})
		if err != nil || len(es) != 1 {
			t.Fatalf("List: %d, %v", len(es), err)
		}
		b, err := s.ScheduledBacklog(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		ms, err := s.PoisonCandidates(ctx, minAttempts)
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(t0); poisonTime == 0 || d < poisonTime {
			poisonTime = d
		}
		t0 = time.Now()
		blocked, err := s.BlockedStreams(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(t0); blockedTime == 0 || d < blockedTime {
			blockedTime = d
		}
		if depth != g.DLQPending || !es[0].FailureTime.Equal(g.OldestDLQ) || b.Count != g.Scheduled ||
			len(ms) != min(g.PoisonCandidates, store.MaxPoisonCandidates) || blocked != g.BlockedStreams {
			t.Fatalf("the monitoring queries say %d, %v, %d, %d, %d; Gauges %+v",
				depth, es[0].FailureTime, b.Count, len(ms), blocked, g)
		}
	}
	old() // warm both paths' caches alike
	newTime := bestOf(5, func() {
		if _, err := s.Gauges(ctx, minAttempts); err != nil {
			t.Fatal(err)
		}
	})
	oldTime := bestOf(5, old)

	plan := queryPlan(t, s, s.sql(gaugesSQL), time.Now().UnixMilli(), minAttempts, time.Now().UnixMilli())
	text := strings.Join(plan, "\n")
	t.Logf("%d rows, %d poison candidates (1 KB payloads): Gauges %v, the five calls it replaces %v "+
		"(of which PoisonCandidates %v, BlockedStreams %v; best of 5)\n%s",
		rows, g.PoisonCandidates, newTime.Round(10*time.Microsecond), oldTime.Round(10*time.Microsecond),
		poisonTime.Round(10*time.Microsecond), blockedTime.Round(10*time.Microsecond), text)
	coroutines := map[string]bool{}
	for _, line := range plan {
		if name, ok := strings.CutPrefix(line, "CO-ROUTINE "); ok {
			coroutines[name] = true
		}
	}
	for _, line := range plan {
		// A SCAN of the outbox reads the whole table, or a whole index;
		// only the partial indexes of the few rows counted may be read
		// whole (SEARCH is a range of an index). A SCAN of a co-routine
		// reads the rows a subquery found.
		target, ok := strings.CutPrefix(line, "SCAN ")
		if !ok || coroutines[target] || strings.HasPrefix(target, "(") || target == "CONSTANT ROW" ||
			strings.Contains(line, "dead_letters") || strings.Contains(line, "outbox_failed") ||
			strings.Contains(line, "outbox_scheduled") || strings.Contains(line, "outbox_lease") {
			continue
		}
		t.Errorf("the gauges read the outbox whole (%s):\n%s", line, text)
	}
}

// bestOf runs f n times and returns its shortest run.
func bestOf(n int, f func()) time.Duration {
	var best time.Duration
	for i := range n {
		t0 := time.Now()
		f()
		if d := time.Since(t0); i == 0 || d < best {
			best = d
		}
	}
	return best
}
