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
