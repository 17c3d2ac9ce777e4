package postgres

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// benchSize is one backlog of BenchmarkClaim.
type benchSize struct {
	name string
	backlog
}

// benchSizes are the backlogs: pending messages in streams of ten, and
// waiting retries an hour away that a claim must never read.
var benchSizes = []benchSize{
	{"10k", backlog{Pending: 10_000, Streams: 1_000, Scheduled: 1_000}},
	{"100k", backlog{Pending: 100_000, Streams: 10_000, Scheduled: 10_000}},
	{"1m", backlog{Pending: 1_000_000, Streams: 100_000, Scheduled: 100_000}},
}

// BenchmarkClaim measures claim-and-complete batches of 100 (each
// ProcessBatch completes the previous 100 as Published and claims the next
// 100, strict ordering) against large backlogs, reporting messages per
// second and the p50/p99 latency of one ProcessBatch call. It runs only
// with BACKSTOP_BENCH_POSTGRES=1; BACKSTOP_BENCH_SIZES picks sizes (such
// as "10k,100k"), BACKSTOP_BENCH_EXPLAIN=1 logs EXPLAIN (ANALYZE, BUFFERS)
// of the claim after loading. For example:
//
//	BACKSTOP_BENCH_POSTGRES=1 BACKSTOP_BENCH_SIZES=10k,100k \
//	    go test -run '^$' -bench BenchmarkClaim -benchtime 300x ./store/postgres/
func BenchmarkClaim(b *testing.B) {
	if os.Getenv("BACKSTOP_BENCH_POSTGRES") == "" {
		b.Skip("set BACKSTOP_BENCH_POSTGRES=1 to run (it loads up to 1.1M rows)")
	}
	want := os.Getenv("BACKSTOP_BENCH_SIZES")
	for _, sz := range benchSizes {
		if want != "" && !slices.Contains(strings.Split(want, ","), sz.name) {
			continue
		}
		var bs *benchStore
		for _, instances := range []int{1, 4} {
			b.Run(fmt.Sprintf("pending=%s/instances=%d", sz.name, instances), func(sub *testing.B) {
				if bs == nil {
					bs = newBenchStore(b, sub, sz)
				}
				bs.run(sub, instances)
			})
		}
	}
}

// benchStore is a loaded backlog shared by the runs of one size.
type benchStore struct {
	s       *Store
	size    benchSize
	mu      sync.Mutex
	used    int // messages claimed since the last top-up
	nextRow int
}

// newBenchStore loads sz into a fresh schema that parent drops at the end.
func newBenchStore(parent, sub *testing.B, sz benchSize) *benchStore {
	start := time.Now()
	schema := newSchema(parent)
	s, err := New(schemaPool(parent, schema, 8), store.Config{})
	if err != nil {
		sub.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		sub.Fatal(err)
	}
	sz.load(sub, s)
	if _, err := s.pool.Exec(context.Background(), "VACUUM ANALYZE "+s.n.outbox); err != nil {
		sub.Fatal(err)
	}
	sub.Logf("loaded %d pending (%d streams) and %d waiting retries in %s",
		sz.Pending, sz.Streams, sz.Scheduled, time.Since(start).Round(time.Millisecond))
	if os.Getenv("BACKSTOP_BENCH_EXPLAIN") != "" {
		plan, err := s.explainClaim(context.Background(), store.ClaimRequest{Limit: 100}, true)
		if err != nil {
			sub.Fatal(err)
		}
		// Benchmark logs are cut short: the plan goes to stderr whole.
		fmt.Fprintf(os.Stderr, "EXPLAIN (ANALYZE, BUFFERS) of the claim at %s:\n%s\n", sz.name, plan)
	}
	return &benchStore{s: s, size: sz, nextRow: sz.Pending + sz.Scheduled}
}

// topUp writes as many fresh messages as were claimed once a tenth of the
// backlog is gone, so that every run sees about the same backlog.
func (bs *benchStore) topUp(b *testing.B) {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if bs.used < bs.size.Pending/10 {
		return
	}
	backlog{Pending: bs.used, Streams: bs.size.Streams}.loadFrom(b, bs.s, bs.nextRow)
	bs.nextRow += bs.used
	bs.used = 0
}

func (bs *benchStore) run(b *testing.B, instances int) {
	ctx := context.Background()
	var (
		mu      sync.Mutex
		lat     []time.Duration
		claimed int
		paused  time.Duration
		wg      sync.WaitGroup
	)
	per := b.N / instances
	b.ResetTimer()
	start := time.Now()
	for w := range instances {
		n := per
		if w == 0 {
			n += b.N % instances
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			batch := &store.Batch{Instance: store.Instance{ID: fmt.Sprintf("bench-%d", w)}, Claim: store.ClaimRequest{Limit: 100}}
			for range n {
				t0 := time.Now()
				r, err := bs.s.ProcessBatch(ctx, batch)
				d := time.Since(t0)
				if err != nil {
					b.Error(err)
					return
				}
				batch.Completions = batch.Completions[:0]
				for _, m := range r.Claimed {
					batch.Completions = append(batch.Completions, store.Completion{ID: m.ID, Status: outbox.StatusPublished})
				}
				mu.Lock()
				lat, claimed = append(lat, d), claimed+len(r.Claimed)
				mu.Unlock()
				bs.mu.Lock()
				bs.used += len(r.Claimed)
				due := bs.used >= bs.size.Pending/10
				bs.mu.Unlock()
				if due {
					t := time.Now()
					bs.topUp(b)
					mu.Lock()
					paused += time.Since(t)
					mu.Unlock()
				}
			}
			batch.Claim.Limit = 0
			if _, err := bs.s.ProcessBatch(ctx, batch); err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start) - paused/time.Duration(instances)
	b.StopTimer()
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	ms := func(q float64) float64 {
		return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))]) / float64(time.Millisecond)
	}
	b.ReportMetric(float64(claimed)/elapsed.Seconds(), "msgs/s")
	b.ReportMetric(ms(0.50), "p50-ms")
	b.ReportMetric(ms(0.99), "p99-ms")
	b.ReportMetric(float64(claimed)/float64(len(lat)), "msgs/batch")
}
