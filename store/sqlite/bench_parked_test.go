package sqlite

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// BenchmarkClaimPastParked: a claim of 100 from one stream whose head is
// followed by parked messages that do not hold it, 0 or 200k of them,
// then live ones. Parked is one of
//
//	dead-release:  dead letters of ordering release;
//	retry-release: retries of ordering release due in an hour;
//	dead-released: dead letters of a strict stream released past them;
//	retry-none:    retries of ordering none in the stream (claimed as
//	               unordered, passed over by the stream read).
//
// Each batch completes the previous claim (deleted) and claims 100.
//
//	BACKSTOP_BENCH_SQLITE=1 go test -run '^$' -bench BenchmarkClaimPastParked -benchtime 200x ./store/sqlite/
func BenchmarkClaimPastParked(b *testing.B) {
	if os.Getenv("BACKSTOP_BENCH_SQLITE") == "" {
		b.Skip("set BACKSTOP_BENCH_SQLITE=1 to run (it writes 200k rows per shape)")
	}
	for _, kind := range []string{"dead-release", "retry-release", "dead-released", "retry-none"} {
		for _, parked := range []int{0, 200_000} {
			b.Run(fmt.Sprintf("%s/parked=%d", kind, parked), func(b *testing.B) {
				s, _ := openBench(b, "")
				loadParked(b, s, kind, parked)
				ctx := context.Background()
				batch := &store.Batch{Instance: store.Instance{ID: "bench"}, Claim: store.ClaimRequest{Limit: 100}}
				r := &sample{}
				b.ResetTimer()
				for range b.N {
					t0 := time.Now()
					res, err := s.ProcessBatch(ctx, batch)
					r.lat = append(r.lat, time.Since(t0))
					if err != nil {
						b.Fatal(err)
					}
					if len(res.Claimed) != 100 {
						b.Fatalf("claimed %d, want 100", len(res.Claimed))
					}
					batch.Completions = batch.Completions[:0]
					for _, m := range res.Claimed {
						batch.Completions = append(batch.Completions, store.Completion{ID: m.ID, Status: outbox.StatusPublished})
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(r.quantile(0.50))/1e6, "p50-ms")
				b.ReportMetric(float64(r.quantile(0.99))/1e6, "p99-ms")
			})
		}
	}
}

// loadParked writes parked messages of kind to stream s0 of destination
// bench, then enough live ones behind them for every batch of the run.
func loadParked(b *testing.B, s *Store, kind string, parked int) {
	exec := func(q string, args ...any) {
		if _, err := s.w.Exec(s.sql(q), args...); err != nil {
			b.Fatalf("%s: %v", q, err)
		}
	}
	now := time.Now().UnixMilli()
	insertRows(b, s, parked, 1, "s")
	switch kind {
	case "dead-release":
		exec(`UPDATE {{prefix}}outbox SET ordering = 'release', dead_lettered_at = ?, status = status | 32768, attempts = 5`, now)
	case "retry-release":
		exec(`UPDATE {{prefix}}outbox SET ordering = 'release', scheduled_for = ?, status = status | 32768, attempts = 1`,
			now+time.Hour.Milliseconds())
	case "dead-released":
		exec(`UPDATE {{prefix}}outbox SET dead_lettered_at = ?, stream_released_at = ?, status = status | 32768, attempts = 5`, now, now)
	case "retry-none":
		exec(`UPDATE {{prefix}}outbox SET ordering = 'none', scheduled_for = ?, status = status | 32768, attempts = 1`,
			now+time.Hour.Milliseconds())
	}
	insertRows(b, s, 100*(b.N+1), 1, "s")
	exec(`ANALYZE`)
}

// BenchmarkClaimDuePastPublished: a claim of destination b's 100 due
// unordered retries while destination a has 200k delivered retries kept
// under Retention (a published retry keeps its scheduled_for).
//
//	BACKSTOP_BENCH_SQLITE=1 go test -run '^$' -bench BenchmarkClaimDuePastPublished -benchtime 50x ./store/sqlite/
func BenchmarkClaimDuePastPublished(b *testing.B) {
	if os.Getenv("BACKSTOP_BENCH_SQLITE") == "" {
		b.Skip("set BACKSTOP_BENCH_SQLITE=1 to run (it writes 200k rows)")
	}
	dir := b.TempDir()
	s, err := Open(context.Background(), dir+"/bench.db", store.Config{Retention: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	write := func(dest string, n int, set string) {
		q := `WITH RECURSIVE g(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM g WHERE i + 1 < ?1)
INSERT INTO {{prefix}}outbox (destination, type, payload) SELECT ?2, 't', '{}' FROM g`
		if _, err := s.w.Exec(s.sql(q), n, dest); err != nil {
			b.Fatal(err)
		}
		if _, err := s.w.Exec(s.sql(`UPDATE {{prefix}}outbox SET attempts = 1, `+set+` WHERE destination = ?1`),
			dest, now.Add(-2*time.Hour).UnixMilli(), now.Add(-time.Hour).UnixMilli()); err != nil {
			b.Fatal(err)
		}
	}
	write("a", 200_000, "status = 32773, published_at = ?3, scheduled_for = ?2")
	write("b", 100, "status = 32769, scheduled_for = ?3")
	if _, err := s.w.Exec(`ANALYZE`); err != nil {
		b.Fatal(err)
	}
	batch := &store.Batch{Instance: store.Instance{ID: "i"}, Claim: store.ClaimRequest{Limit: 100}}
	r := &sample{}
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		res, err := s.ProcessBatch(context.Background(), batch)
		r.lat = append(r.lat, time.Since(t0))
		if err != nil || len(res.Claimed) != 100 {
			b.Fatalf("claimed %d (%v), want 100", len(res.Claimed), err)
		}
		b.StopTimer()
		if _, err := s.w.Exec(s.sql(`UPDATE {{prefix}}outbox SET instance_id = NULL, lease_expiry = NULL WHERE destination = 'b'`)); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(r.quantile(0.50))/1e6, "p50-ms")
}
