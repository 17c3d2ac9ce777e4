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

	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// claimShape is a backlog that hurt the claim before it walked stream
// heads (issue 9).
type claimShape struct {
	name string
	// streams: pending messages go round-robin over this many strict
	// streams of destination "bench".
	streams int
	// leasedHeads: every stream's head is leased to another instance for
	// an hour; the claims find nothing.
	leasedHeads bool
	// deadHead: half the backlog waits in one strict stream behind a
	// dead-lettered head; the other half is in `streams` free streams.
	deadHead bool
	// ordering is the destination's ordering mode (empty: strict).
	ordering outbox.Ordering
	// leasedRuns: the first leasedRuns messages of every stream are leased
	// to another instance for an hour; under ordering none the claims
	// pass over them.
	leasedRuns int
	// retryingRuns: the first retryingRuns messages of every stream failed
	// once and wait an hour for their retry; under ordering release the
	// claims pass over them.
	retryingRuns int
}

var claimShapes = []claimShape{
	{name: "streams=100", streams: 100},
	{name: "streams=10k", streams: 10_000},
	{name: "heads-leased/streams=10k", streams: 10_000, leasedHeads: true},
	{name: "dead-head+100-free", streams: 100, deadHead: true},
	{name: "none/streams=100", streams: 100, ordering: outbox.OrderingNone},
	{name: "none/64-leased/streams=100", streams: 100, ordering: outbox.OrderingNone, leasedRuns: 64},
	{name: "release/64-retrying/streams=100", streams: 100, ordering: outbox.OrderingRelease, retryingRuns: 64},
	{name: "release/1000-retrying/streams=100", streams: 100, ordering: outbox.OrderingRelease, retryingRuns: 1000},
}

var claimShapeSizes = []struct {
	name    string
	pending int
}{{"10k", 10_000}, {"200k", 200_000}, {"1m", 1_000_000}}

// BenchmarkClaimShapes measures ProcessBatch (complete the previous batch
// as published, claim 100) on the backlogs of claimShapes at 10k, 200k and
// 1M pending, and prints a table with the ratio of p99 at each size to p99
// at 10k (the target: within 2x at 1M). It runs only with
// BACKSTOP_BENCH_POSTGRES=1; BACKSTOP_BENCH_SIZES and BACKSTOP_BENCH_SHAPES
// pick sizes and shapes (comma-separated names). Backlogs are built with
// INSERT ... SELECT generate_series, the stream rows with the migration's
// backfill, then VACUUM ANALYZE. For example (make bench-postgres):
//
//	BACKSTOP_BENCH_POSTGRES=1 go test -run '^$' -bench 'BenchmarkClaimShapes' -benchtime 200x -timeout 60m ./store/postgres/
func BenchmarkClaimShapes(b *testing.B) {
	if os.Getenv("BACKSTOP_BENCH_POSTGRES") == "" {
		b.Skip("set BACKSTOP_BENCH_POSTGRES=1 to run (it loads up to 1M rows per shape)")
	}
	sizes := pick(os.Getenv("BACKSTOP_BENCH_SIZES"))
	shapes := pick(os.Getenv("BACKSTOP_BENCH_SHAPES"))
	results := map[string]map[string]*sample{}
	start := loadAvg()
	for _, sh := range claimShapes {
		if !shapes(sh.name) {
			continue
		}
		results[sh.name] = map[string]*sample{}
		loads := map[string]*shapeLoad{}
		for _, sz := range claimShapeSizes {
			if sizes(sz.name) {
				loads[sz.name] = loadShape(b, sh, sz.pending)
				results[sh.name][sz.name] = &sample{}
			}
		}
		// The sizes take turns, three rounds, so that a busy moment of the
		// machine does not fall on one size only.
		for round := range shapeRounds {
			for _, sz := range claimShapeSizes {
				ld := loads[sz.name]
				if ld == nil {
					continue
				}
				b.Run(fmt.Sprintf("%s/pending=%s/round=%d", sh.name, sz.name, round+1), func(b *testing.B) {
					r := ld.run(b)
					if b.N > 1 {
						results[sh.name][sz.name].add(r)
					}
					b.ReportMetric(float64(r.quantile(0.50))/1e6, "p50-ms")
					b.ReportMetric(float64(r.quantile(0.99))/1e6, "p99-ms")
					b.ReportMetric(r.rate(), "msgs/s")
				})
			}
		}
		for _, ld := range loads {
			ld.close()
		}
	}
	fmt.Fprint(os.Stderr, shapeTable(results, "PostgreSQL", start, loadAvg()))
}

// shapeRounds is how many times each size of a shape is measured.
const shapeRounds = 3

// sample is the batches of one or more runs.
type sample struct {
	lat     []time.Duration
	claimed int
	elapsed time.Duration
}

func (s *sample) add(o *sample) {
	s.lat = append(s.lat, o.lat...)
	s.claimed += o.claimed
	s.elapsed += o.elapsed
}

func (s *sample) quantile(q float64) time.Duration {
	if len(s.lat) == 0 {
		return 0
	}
	l := slices.Clone(s.lat)
	slices.Sort(l)
	return l[min(len(l)-1, int(q*float64(len(l))))]
}

func (s *sample) rate() float64 { return float64(s.claimed) / s.elapsed.Seconds() }

// shapeTable renders results with the ratio of each size's p99 to the
// p99 at 10k.
func shapeTable(results map[string]map[string]*sample, db, start, end string) string {
	var t strings.Builder
	fmt.Fprintf(&t, "\n%s, load average %s at start, %s at end\n\n", db, start, end)
	t.WriteString("| shape | pending | batches | claimed/batch | msgs/s | p50 ms | p99 ms | p99 / p99 at 10k |\n|---|---|---|---|---|---|---|---|\n")
	for _, sh := range claimShapes {
		base := results[sh.name]["10k"]
		for _, sz := range claimShapeSizes {
			r := results[sh.name][sz.name]
			if r == nil || len(r.lat) == 0 {
				continue
			}
			ratio := "—"
			if base != nil && base.quantile(0.99) > 0 {
				ratio = fmt.Sprintf("%.2f", float64(r.quantile(0.99))/float64(base.quantile(0.99)))
			}
			fmt.Fprintf(&t, "| %s | %s | %d | %.0f | %.0f | %.2f | %.2f | %s |\n", sh.name, sz.name, len(r.lat),
				float64(r.claimed)/float64(len(r.lat)), r.rate(),
				float64(r.quantile(0.50))/1e6, float64(r.quantile(0.99))/1e6, ratio)
		}
	}
	return t.String()
}

// loadAvg is the first three fields of /proc/loadavg ("?" elsewhere).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// pick returns a filter for a comma-separated list (empty: all).
func pick(list string) func(string) bool {
	return func(name string) bool {
		return list == "" || slices.Contains(strings.Split(list, ","), name)
	}
}

// shapeLoad is a loaded shape.
type shapeLoad struct {
	s       *Store
	sh      claimShape
	pending int
	free    int // messages in free streams
	mu      sync.Mutex
	used    int
	close   func()
}

// loadShape builds sh with pending messages in a fresh schema that
// shapeLoad.close drops.
func loadShape(b *testing.B, sh claimShape, pending int) *shapeLoad {
	parent := b
	ctx := context.Background()
	start := time.Now()
	admin := admin(parent)
	schema := fmt.Sprintf("t_bench_%d", time.Now().UnixNano())
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		b.Fatal(err)
	}
	pool := schemaPool(parent, schema, 4)
	s, err := New(pool, store.Config{DefaultPolicy: store.Policy{Ordering: sh.ordering}})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	ld := &shapeLoad{s: s, sh: sh, pending: pending, free: pending, close: func() {
		pool.Close()
		if _, err := admin.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			parent.Errorf("drop schema %s: %v", schema, err)
		}
	}}
	exec := func(q string, args ...any) {
		if _, err := s.pool.Exec(ctx, q, args...); err != nil {
			b.Fatalf("%s: %v", q, err)
		}
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	// Bulk load without the per-row trigger, then build the stream rows as
	// migration 0003 does for an existing outbox.
	for _, q := range []string{"SET session_replication_role = replica"} {
		if _, err := conn.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	load := func(n, streams int, prefix string) {
		q := `INSERT INTO ` + s.n.outbox + ` (destination, stream, type, payload)
			SELECT 'bench', $1 || (i % $2), 'bench.event', '{"n":1}' FROM generate_series(0, $3 - 1) i`
		if _, err := conn.Exec(ctx, q, prefix, streams, n); err != nil {
			b.Fatal(err)
		}
	}
	if sh.deadHead {
		ld.free = pending / 2
		load(pending-ld.free, 1, "blocked")
	}
	load(ld.free, sh.streams, "s")
	if _, err := conn.Exec(ctx, "RESET session_replication_role"); err != nil {
		b.Fatal(err)
	}
	conn.Release()
	exec(`INSERT INTO ` + s.n.qual + `streams (destination, stream, head_seq)
		SELECT destination, stream, min(seq) FROM ` + s.n.outbox + ` WHERE published_at IS NULL AND stream <> ''
		GROUP BY destination, stream`)
	if sh.deadHead {
		exec(`UPDATE ` + s.n.outbox + ` SET dead_lettered_at = now(), status = status | 32768, attempts = 1
			WHERE seq = (SELECT min(seq) FROM ` + s.n.outbox + ` WHERE stream = 'blocked0')`)
	}
	if sh.leasedHeads {
		exec(`UPDATE ` + s.n.outbox + ` SET instance_id = 'other', lease_expiry = now() + interval '1 hour'
			WHERE seq IN (SELECT min(seq) FROM ` + s.n.outbox + ` GROUP BY destination, stream)`)
		exec(`UPDATE ` + s.n.qual + `streams SET ready = false, wait_until = now() + interval '1 hour'`)
		exec(`INSERT INTO ` + s.n.instances + ` (id, last_heartbeat) VALUES ('other', now() + interval '1 hour')`)
	}
	if sh.leasedRuns > 0 {
		exec(`UPDATE `+s.n.outbox+` o SET instance_id = 'other', lease_expiry = now() + interval '1 hour'
			FROM (SELECT seq, row_number() OVER (PARTITION BY destination, stream ORDER BY seq) AS k
				FROM `+s.n.outbox+`) r
			WHERE o.seq = r.seq AND r.k <= $1`, sh.leasedRuns)
		exec(`INSERT INTO ` + s.n.instances + ` (id, last_heartbeat) VALUES ('other', now() + interval '1 hour')`)
	}
	if sh.retryingRuns > 0 {
		exec(`UPDATE `+s.n.outbox+` o SET scheduled_for = now() + interval '1 hour', attempts = 1, status = status | 32768,
				first_failed_at = now(), last_failed_at = now(), failure_reason = 1
			FROM (SELECT seq, row_number() OVER (PARTITION BY destination, stream ORDER BY seq) AS k
				FROM `+s.n.outbox+`) r
			WHERE o.seq = r.seq AND r.k <= $1`, sh.retryingRuns)
	}
	for _, t := range []string{s.n.outbox, s.n.qual + "streams", s.n.qual + "stream_wakes"} {
		exec("VACUUM ANALYZE " + t)
	}
	b.Logf("%s: loaded %d pending in %s", sh.name, pending, time.Since(start).Round(time.Millisecond))
	if os.Getenv("BACKSTOP_BENCH_EXPLAIN") != "" {
		plan, err := s.explainClaim(ctx, store.ClaimRequest{Limit: 100}, true)
		if err != nil {
			b.Fatal(err)
		}
		fmt.Fprintf(os.Stderr, "EXPLAIN (ANALYZE, BUFFERS) of the claim, %s at %d pending:\n%s\n", sh.name, pending, plan)
	}
	return ld
}

// topUp writes as many messages as were delivered, into the free streams,
// once a tenth of them is gone, so that every batch sees about the same
// backlog. Writes go through the trigger, as an application's would.
func (ld *shapeLoad) topUp(b *testing.B) time.Duration {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	if ld.used < ld.free/10 {
		return 0
	}
	start := time.Now()
	q := `INSERT INTO ` + ld.s.n.outbox + ` (destination, stream, type, payload)
		SELECT 'bench', 's' || (i % $1), 'bench.event', '{"n":1}' FROM generate_series(0, $2 - 1) i`
	if _, err := ld.s.pool.Exec(context.Background(), q, ld.sh.streams, ld.used); err != nil {
		b.Fatal(err)
	}
	ld.used = 0
	return time.Since(start)
}

// run runs b.N batches of one instance, each claiming 100.
func (ld *shapeLoad) run(b *testing.B) *sample { return ld.runLimit(b, 100) }

// runLimit runs b.N batches of one instance, each recording the previous
// batch's messages as published and claiming limit.
func (ld *shapeLoad) runLimit(b *testing.B, limit int) *sample {
	ctx := context.Background()
	batch := &store.Batch{Instance: store.Instance{ID: "bench"}, Claim: store.ClaimRequest{Limit: limit}}
	r := &sample{lat: make([]time.Duration, 0, b.N)}
	var paused time.Duration
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		t0 := time.Now()
		res, err := ld.s.ProcessBatch(ctx, batch)
		r.lat = append(r.lat, time.Since(t0))
		if err != nil {
			b.Fatal(err)
		}
		batch.Completions = batch.Completions[:0]
		for _, m := range res.Claimed {
			batch.Completions = append(batch.Completions, store.Completion{ID: m.ID, Status: outbox.StatusPublished})
		}
		r.claimed += len(res.Claimed)
		ld.mu.Lock()
		ld.used += len(res.Claimed)
		ld.mu.Unlock()
		paused += ld.topUp(b)
	}
	r.elapsed = time.Since(start) - paused
	b.StopTimer()
	batch.Claim.Limit = 0
	if _, err := ld.s.ProcessBatch(ctx, batch); err != nil {
		b.Fatal(err)
	}
	return r
}

// BenchmarkBatchSizeOverStreams measures ProcessBatch (record the previous
// batch published, claim the next) with a small and a large claim over
// 40,000 strict streams holding a message each (written again as they are
// delivered), and prints each size's cost per message and the large
// size's ratio to the small one's (at most about 1 when a batch's cost is
// linear in its size; the relay's prefetch grows to 4,096). Migrations
// 0025 and 0026 took out two costs that grew with the square of a batch
// (4,096: 87-127 us/msg before, 71-73 after). BACKSTOP_BENCH_POSTGRES=1
// runs it:
//
//	BACKSTOP_BENCH_POSTGRES=1 go test -run '^$' -bench 'BenchmarkBatchSizeOverStreams' -benchtime 20x ./store/postgres/
func BenchmarkBatchSizeOverStreams(b *testing.B) {
	if os.Getenv("BACKSTOP_BENCH_POSTGRES") == "" {
		b.Skip("set BACKSTOP_BENCH_POSTGRES=1 to run")
	}
	ld := loadShape(b, claimShape{name: "streams=40k", streams: 40_000}, 40_000)
	defer ld.close()
	limits := []int{256, 4096}
	perMsg := map[int][]float64{}
	for round := range shapeRounds {
		for _, limit := range limits {
			b.Run(fmt.Sprintf("limit=%d/round=%d", limit, round+1), func(b *testing.B) {
				r := ld.runLimit(b, limit)
				us := float64(r.elapsed.Microseconds()) / float64(max(r.claimed, 1))
				if b.N > 1 {
					perMsg[limit] = append(perMsg[limit], us)
				}
				b.ReportMetric(us, "us/msg")
				b.ReportMetric(r.rate(), "msgs/s")
			})
		}
	}
	small, large := testenv.Median(perMsg[limits[0]]), testenv.Median(perMsg[limits[1]])
	if small > 0 {
		fmt.Fprintf(os.Stderr, "PostgreSQL, 40k strict streams: %.1f us/msg claiming %d, %.1f us/msg claiming %d: %.2fx\n",
			small, limits[0], large, limits[1], large/small)
	}
}

// BenchmarkEnqueueWriters measures Enqueue of one message per transaction
// by 8 concurrent writers: all on one stream, each on its own stream, and
// unordered, and prints the rates with the ratio to unordered (the target:
// one stream at least 50 %). Writers of one stream queue on its row lock
// (commit order); see docs/claim.md. BACKSTOP_BENCH_POSTGRES=1 runs it:
//
//	BACKSTOP_BENCH_POSTGRES=1 go test -run '^$' -bench 'BenchmarkEnqueueWriters' -benchtime 4000x ./store/postgres/
func BenchmarkEnqueueWriters(b *testing.B) {
	if os.Getenv("BACKSTOP_BENCH_POSTGRES") == "" {
		b.Skip("set BACKSTOP_BENCH_POSTGRES=1 to run")
	}
	const writers = 8
	cases := []struct {
		name   string
		stream func(w int) string
	}{
		{"unordered", func(int) string { return "" }},
		{"one-stream", func(int) string { return "s" }},
		{"eight-streams", func(w int) string { return fmt.Sprintf("s%d", w) }},
	}
	// Three rounds, the cases interleaved, so that a busy moment of the
	// machine does not fall on one case only; the table shows medians.
	all := map[string][]float64{}
	for round := range 3 {
		for _, c := range cases {
			b.Run(fmt.Sprintf("%s/round=%d", c.name, round+1), func(b *testing.B) {
				schema := newSchema(b)
				s, err := New(schemaPool(b, schema, writers+2), store.Config{})
				if err != nil {
					b.Fatal(err)
				}
				if err := s.Migrate(context.Background()); err != nil {
					b.Fatal(err)
				}
				r := enqueueRate(b, writers, func(w int) error {
					return s.Enqueue(context.Background(), &outbox.Message{Destination: "d", Stream: c.stream(w), Type: "t", Payload: []byte("{}")})
				})
				if b.N > 1 {
					all[c.name] = append(all[c.name], r)
				}
				b.ReportMetric(r, "msgs/s")
			})
		}
	}
	printWriterRates(medians(all), "PostgreSQL")
}

// medians maps each case's rates to their median.
func medians(all map[string][]float64) map[string]float64 {
	out := map[string]float64{}
	for name, rs := range all {
		out[name] = testenv.Median(rs)
	}
	return out
}

// enqueueRate runs b.N calls of write spread over writers goroutines and
// returns calls per second.
func enqueueRate(b *testing.B, writers int, write func(w int) error) float64 {
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for w := range writers {
		n := b.N / writers
		if w == 0 {
			n += b.N % writers
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n {
				if err := write(w); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	return float64(b.N) / elapsed.Seconds()
}

func printWriterRates(rates map[string]float64, db string) {
	base := rates["unordered"]
	var t strings.Builder
	fmt.Fprintf(&t, "\n| %s, 8 writers (median of 3 rounds) | msgs/s | vs unordered |\n|---|---|---|\n", db)
	for _, name := range []string{"unordered", "one-stream", "eight-streams"} {
		r, ok := rates[name]
		if !ok {
			continue
		}
		ratio := "—"
		if base > 0 {
			ratio = fmt.Sprintf("%.0f %%", 100*r/base)
		}
		fmt.Fprintf(&t, "| %s | %.0f | %s |\n", name, r, ratio)
	}
	fmt.Fprint(os.Stderr, t.String())
}

// BenchmarkClaimOverDeepStreams claims with the relay's default batch (256)
// over 10,000 strict streams, one message deep and twenty deep, and prints
// the cost of a leased message in each. Before migration 0030 the claim
// locked and read cap + 32 ready streams (up to its share and four more
// rows of each), though over deep streams only cap / 16 had room; it now
// reads them in chunks until the cap is filled:
//
//	BACKSTOP_BENCH_POSTGRES=1 go test -run '^$' -bench 'BenchmarkClaimOverDeepStreams' -benchtime 100x ./store/postgres/
func BenchmarkClaimOverDeepStreams(b *testing.B) {
	if os.Getenv("BACKSTOP_BENCH_POSTGRES") == "" {
		b.Skip("set BACKSTOP_BENCH_POSTGRES=1 to run")
	}
	const limit = 256
	depths := []int{1, 20}
	loads := map[int]*shapeLoad{}
	for _, d := range depths {
		loads[d] = loadShape(b, claimShape{name: fmt.Sprintf("streams=10k/depth=%d", d), streams: 10_000}, 10_000*d)
		defer loads[d].close()
	}
	perMsg := map[int][]float64{}
	for round := range shapeRounds {
		for _, d := range depths {
			b.Run(fmt.Sprintf("depth=%d/round=%d", d, round+1), func(b *testing.B) {
				r := loads[d].runLimit(b, limit)
				us := float64(r.elapsed.Microseconds()) / float64(max(r.claimed, 1))
				if b.N > 1 {
					perMsg[d] = append(perMsg[d], us)
				}
				b.ReportMetric(us, "us/msg")
				b.ReportMetric(float64(r.claimed)/float64(b.N), "msgs/claim")
			})
		}
	}
	shallow, deep := testenv.Median(perMsg[depths[0]]), testenv.Median(perMsg[depths[1]])
	if shallow > 0 {
		fmt.Fprintf(os.Stderr, "PostgreSQL, 10k strict streams, claims of %d: %.1f us/msg one deep, %.1f us/msg twenty deep: %.2fx\n",
			limit, shallow, deep, deep/shallow)
	}
}
