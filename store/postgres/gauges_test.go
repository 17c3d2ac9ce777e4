package postgres

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/store"
)

// gaugeBacklog is the shape TestGaugesPlan loads, per 200 rows: 150 fresh
// messages (half unordered, half in strict streams), 40 in strict streams
// of 4 whose head failed and waits an hour for its retry (1 to 6
// attempts), 9 unordered failed messages waiting likewise, 1 dead-lettered
// with its pending entry, and a leased message every 400. Failed rows carry
// a 1 KB payload, the others a few bytes.
func loadGaugeBacklog(t *testing.T, s *Store, rows int) {
	t.Helper()
	ctx := context.Background()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	o := s.n.outbox
	// Bulk load without the per-row triggers (the stream rows are not
	// read by the gauges).
	exec("SET session_replication_role = replica")
	defer exec("RESET session_replication_role")
	fresh, heads, loose, dead := rows*150/200, rows*40/200/4, rows*9/200, rows/200
	exec(`INSERT INTO `+o+` (destination, stream, type, payload)
		SELECT 'd', CASE WHEN i % 2 = 0 THEN '' ELSE 's' || (i % 5000) END, 'e', '{"n":1}'
		FROM generate_series(1, $1) i`, fresh)
	// Streams of 4: the head fails, the others wait behind it.
	exec(`INSERT INTO `+o+` (destination, stream, type, payload, status, attempts, scheduled_for)
		SELECT 'd', 'f' || (i / 4), 'e',
			CASE WHEN i % 4 = 0 THEN convert_to(repeat('x', 1000), 'UTF8') ELSE '{"n":1}' END,
			CASE WHEN i % 4 = 0 THEN 1 | 32768 ELSE 1 END,
			CASE WHEN i % 4 = 0 THEN 1 + (i / 4) % 6 ELSE 0 END,
			CASE WHEN i % 4 = 0 THEN now() + interval '1 hour' END
		FROM generate_series(0, $1 * 4 - 1) i ORDER BY i`, heads)
	exec(`INSERT INTO `+o+` (destination, stream, type, payload, status, attempts, scheduled_for)
		SELECT 'd', '', 'e', convert_to(repeat('x', 1000), 'UTF8'), 1 | 32768, 1 + i % 6, now() + interval '1 hour'
		FROM generate_series(1, $1) i`, loose)
	exec(`INSERT INTO `+o+` (destination, stream, type, payload, status, attempts, dead_lettered_at)
		SELECT 'd', 'x' || i, 'e', convert_to(repeat('x', 1000), 'UTF8'), 1 | 32768, 3, now() - i * interval '1 second'
		FROM generate_series(1, $1) i`, dead)
	exec(`INSERT INTO `+o+` (destination, stream, type, payload) SELECT 'd', 'x' || i, 'e', '{"n":1}'
		FROM generate_series(1, $1) i`, dead) // a message behind each dead letter
	exec(`INSERT INTO ` + s.n.deadLetters + ` (id, message_id, destination, stream, type, payload, seq, failure_time, attempts)
		SELECT id::text, id::text, destination, stream, type, payload, seq, dead_lettered_at, attempts
		FROM ` + o + ` WHERE dead_lettered_at IS NOT NULL`)
	exec(`UPDATE ` + o + ` SET instance_id = 'other', lease_expiry = now() + interval '1 hour'
		WHERE seq % 400 = 8 AND stream = '' AND status = 1`)
	exec("ANALYZE " + o)
	exec("ANALYZE " + s.n.deadLetters)
}

// TestGaugesPlan loads a backlog (20,000 rows; BACKSTOP_GAUGES_ROWS sets
// another size, 200000 for the figures in docs/operating.md), checks that
// Gauges agrees with the monitoring queries and that its plan reads the
// outbox through indexes only (no sequential scan), and logs the plan and
// the time of Gauges next to that of the five calls it replaces.
func TestGaugesPlan(t *testing.T) {
	rows := 20000
	if v := os.Getenv("BACKSTOP_GAUGES_ROWS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 200 {
			t.Fatalf("BACKSTOP_GAUGES_ROWS = %q: want a number of rows, at least 200", v)
		}
		rows = n
	}
	s, err := openTest(t, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
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
	var poisonTime, blockedTime time.Duration
	least := func(d *time.Duration, t0 time.Time) {
		if e := time.Since(t0); *d == 0 || e < *d {
			*d = e
		}
	}
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
		least(&poisonTime, t0)
		t0 = time.Now()
		blocked, err := s.BlockedStreams(ctx)
		if err != nil {
			t.Fatal(err)
		}
		least(&blockedTime, t0)
		if depth != g.DLQPending || !es[0].FailureTime.Equal(g.OldestDLQ) || b.Count != g.Scheduled ||
			len(ms) != min(g.PoisonCandidates, store.MaxPoisonCandidates) || blocked != g.BlockedStreams {
			t.Fatalf("the monitoring queries say %d, %v, %d, %d, %d; Gauges %+v",
				depth, es[0].FailureTime, b.Count, len(ms), blocked, g)
		}
	}
	old() // warm both paths' caches alike
	best := func(f func()) time.Duration {
		var min time.Duration
		for i := range 5 {
			t0 := time.Now()
			f()
			if d := time.Since(t0); i == 0 || d < min {
				min = d
			}
		}
		return min
	}
	newTime := best(func() {
		if _, err := s.Gauges(ctx, minAttempts); err != nil {
			t.Fatal(err)
		}
	})
	oldTime := best(old)

	var plan []string
	rs, err := s.pool.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+s.gaugesSQL(),
		s.now(), s.policyDests, s.policyModes, string(s.cfg.DefaultPolicy.Ordering), minAttempts)
	if err == nil {
		plan, err = pgx.CollectRows(rs, pgx.RowTo[string])
	}
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(plan, "\n")
	t.Logf("%d rows, %d poison candidates (1 KB payloads): Gauges %v, the five calls it replaces %v "+
		"(of which PoisonCandidates %v, BlockedStreams %v; best of 5)\n%s",
		rows, g.PoisonCandidates, newTime.Round(10*time.Microsecond), oldTime.Round(10*time.Microsecond),
		poisonTime.Round(10*time.Microsecond), blockedTime.Round(10*time.Microsecond), text)
	for _, line := range plan {
		if strings.Contains(line, "Seq Scan on") && strings.Contains(line, "outbox") {
			t.Errorf("the gauges scan the outbox sequentially (%s):\n%s", strings.TrimSpace(line), text)
		}
	}
}
