package sqlite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// The SQLite twin of store/postgres's BenchmarkClaimShapes and
// BenchmarkEnqueueWriters (make bench-sqlite): the same shapes, sizes and
// tables. BACKSTOP_BENCH_SQLITE=1 runs them; BACKSTOP_BENCH_SIZES and
// BACKSTOP_BENCH_SHAPES pick (comma-separated names).
//
//	BACKSTOP_BENCH_SQLITE=1 go test -run '^$' -bench 'BenchmarkClaimShapes|BenchmarkEnqueueWriters' -benchtime 200x ./store/sqlite/

type claimShape struct {
	name        string
	streams     int
	leasedHeads bool
	deadHead    bool
}

var claimShapes = []claimShape{
	{name: "streams=100", streams: 100},
	{name: "streams=10k", streams: 10_000},
	{name: "heads-leased/streams=10k", streams: 10_000, leasedHeads: true},
	{name: "dead-head+100-free", streams: 100, deadHead: true},
}

var claimShapeSizes = []struct {
	name    string
	pending int
}{{"10k", 10_000}, {"200k", 200_000}, {"1m", 1_000_000}}

func pick(list string) func(string) bool {
	return func(name string) bool {
		return list == "" || slices.Contains(strings.Split(list, ","), name)
	}
}

// BenchmarkClaimShapes: see store/postgres's. Each batch completes the
// previous 100 as published and claims 100, one instance.
func BenchmarkClaimShapes(b *testing.B) {
	if os.Getenv("BACKSTOP_BENCH_SQLITE") == "" {
		b.Skip("set BACKSTOP_BENCH_SQLITE=1 to run (it writes up to 1M rows per shape)")
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
		for round := range 3 {
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
			ld.s.Close()
			os.RemoveAll(ld.dir)
		}
	}
	fmt.Fprint(os.Stderr, shapeTable(results, "SQLite", start, loadAvg()))
}

// sample is the batches of one or more runs.
type sample struct {
	lat     []time.Duration
	claimed int
	elapsed time.Duration
	cpu     time.Duration // the process's CPU time in the batches
}

func (s *sample) add(o *sample) {
	s.lat = append(s.lat, o.lat...)
	s.claimed += o.claimed
	s.elapsed += o.elapsed
	s.cpu += o.cpu
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

type shapeLoad struct {
	s    *Store
	dir  string
	sh   claimShape
	free int
	used int
	// again: each delivered message's stream is written a message again
	// once its delivery is recorded, so that every stream keeps one;
	// otherwise the delivered count is written into the first streams
	// once a tenth of the backlog is gone.
	again bool
}

// openBench opens a store in a directory of its own (under dir when set).
func openBench(b *testing.B, dir string) (*Store, string) {
	if dir == "" {
		dir = b.TempDir()
	}
	s, err := Open(context.Background(), filepath.Join(dir, "bench.db"), store.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s, dir
}

// insertRows writes n messages over streams streams named prefix0...,
// through the triggers, in one statement.
func insertRows(b testing.TB, s *Store, n, streams int, prefix string) {
	q := `WITH RECURSIVE g(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM g WHERE i + 1 < ?)
INSERT INTO {{prefix}}outbox (destination, stream, type, payload)
SELECT 'bench', ? || (i % ?), 'bench.event', '{"n":1}' FROM g`
	if _, err := s.w.Exec(s.sql(q), n, prefix, streams); err != nil {
		b.Fatal(err)
	}
}

func loadShape(b *testing.B, sh claimShape, pending int) *shapeLoad {
	start := time.Now()
	dir, err := os.MkdirTemp("", "backstop-bench-")
	if err != nil {
		b.Fatal(err)
	}
	s, _ := openBench(b, dir)
	ld := &shapeLoad{s: s, dir: dir, sh: sh, free: pending}
	exec := func(q string, args ...any) {
		if _, err := s.w.Exec(s.sql(q), args...); err != nil {
			b.Fatalf("%s: %v", q, err)
		}
	}
	if sh.deadHead {
		ld.free = pending / 2
		insertRows(b, s, pending-ld.free, 1, "blocked")
		exec(`UPDATE {{prefix}}outbox SET dead_lettered_at = ?, status = status | 32768, attempts = 1
			WHERE seq = (SELECT min(seq) FROM {{prefix}}outbox WHERE stream = 'blocked0')`, time.Now().UnixMilli())
	}
	insertRows(b, s, ld.free, sh.streams, "s")
	if sh.leasedHeads {
		later := time.Now().Add(time.Hour).UnixMilli()
		exec(`UPDATE {{prefix}}outbox SET instance_id = 'other', lease_expiry = ?
			WHERE seq IN (SELECT min(seq) FROM {{prefix}}outbox GROUP BY destination, stream)`, later)
		exec(`UPDATE {{prefix}}streams SET ready = 0, wait_until = ?`, later)
		exec(`INSERT INTO {{prefix}}instances (id, last_heartbeat) VALUES ('other', ?)`, later)
	}
	exec(`ANALYZE`)
	b.Logf("%s: loaded %d pending in %s", sh.name, pending, time.Since(start).Round(time.Millisecond))
	return ld
}

// run runs b.N batches of one instance, each claiming 100.
func (ld *shapeLoad) run(b *testing.B) *sample { return ld.runLimit(b, 100) }

// runLimit runs b.N batches of one instance, each recording the previous
// batch's messages as published and claiming limit.
func (ld *shapeLoad) runLimit(b *testing.B, limit int) *sample {
	ctx := context.Background()
	batch := &store.Batch{Instance: store.Instance{ID: "bench"}, Claim: store.ClaimRequest{Limit: limit}}
	r := &sample{lat: make([]time.Duration, 0, b.N)}
	var (
		paused  time.Duration
		leased  []string // the streams of batch.Completions
		claimed []string
	)
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		t0, c0 := time.Now(), cpuTime()
		res, err := ld.s.ProcessBatch(ctx, batch)
		r.lat, r.cpu = append(r.lat, time.Since(t0)), r.cpu+cpuTime()-c0
		if err != nil {
			b.Fatal(err)
		}
		batch.Completions, claimed = batch.Completions[:0], claimed[:0]
		for _, m := range res.Claimed {
			batch.Completions = append(batch.Completions, store.Completion{ID: m.ID, Status: outbox.StatusPublished})
			claimed = append(claimed, m.Stream)
		}
		r.claimed += len(res.Claimed)
		if ld.again {
			t := time.Now()
			writeStreams(b, ld.s, leased)
			paused += time.Since(t)
			leased, claimed = claimed, leased
			continue
		}
		ld.used += len(res.Claimed)
		if ld.used >= ld.free/10 {
			t := time.Now()
			insertRows(b, ld.s, ld.used, ld.sh.streams, "s")
			ld.used = 0
			paused += time.Since(t)
		}
	}
	r.elapsed = time.Since(start) - paused
	b.StopTimer()
	batch.Claim.Limit = 0
	if _, err := ld.s.ProcessBatch(ctx, batch); err != nil {
		b.Fatal(err)
	}
	if ld.again {
		writeStreams(b, ld.s, leased)
	}
	return r
}

// writeStreams writes a message into each of streams, through the
// triggers, in one statement.
func writeStreams(b testing.TB, s *Store, streams []string) {
	list, err := jsonList(streams)
	if err != nil {
		b.Fatal(err)
	}
	q := `INSERT INTO {{prefix}}outbox (destination, stream, type, payload)
SELECT 'bench', value, 'bench.event', '{"n":1}' FROM json_each(?)`
	if _, err := s.w.Exec(s.sql(q), list); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkBatchSizeOverStreams: see store/postgres's. ProcessBatch
// (record the previous batch published, claim the next) with a small and
// a large claim over 40,000 strict streams holding a message each (each
// stream written again once its delivery is recorded); it prints each
// size's cost per message, in time taken and in CPU time, and the large
// size's ratio to the small one's (at most about 1 when a batch's cost is
// linear in its size; the relay's prefetch grows to 4,096).
//
// Unlike PostgreSQL's before its migrations 0025 and 0026, SQLite's batch
// has no cost that grows faster than its size: 256 took 195 us/msg (179
// CPU) and 4,096 took 152 (146 CPU), medians of three rounds on a shared
// 2-core machine. Per message, a CPU profile of each size alone (256,
// then 4,096) put the stream reads at 74 and 80 us, the deletions at 31
// and 26, the stream updates at 11 and 11, the commit at 11 and 4. Most
// of a stream read was SQLite preparing its statement again
// (sqlite3Reprepare): once ANALYZE has written sqlite_stat4, a statement
// whose plan used a bound value is prepared again for each new value.
// Without ANALYZE the batch took 114 CPU us/msg at 256 and 91 at 4,096.
// The store does not run ANALYZE, but an application may (or PRAGMA
// optimize); this benchmark does, as BenchmarkClaimShapes does. Since the
// stream reads hide their values from the planner (streamread.go), 4,096
// takes 94-101 CPU us/msg after ANALYZE (146-168 before), 256 takes
// 122-125 (179-192).
//
//	BACKSTOP_BENCH_SQLITE=1 go test -run '^$' -bench BenchmarkBatchSizeOverStreams -benchtime 20x ./store/sqlite/
func BenchmarkBatchSizeOverStreams(b *testing.B) {
	if os.Getenv("BACKSTOP_BENCH_SQLITE") == "" {
		b.Skip("set BACKSTOP_BENCH_SQLITE=1 to run")
	}
	ld := loadShape(b, claimShape{name: "streams=40k", streams: 40_000}, 40_000)
	ld.again = true
	defer os.RemoveAll(ld.dir)
	defer ld.s.Close()
	limits := []int{256, 4096}
	perMsg, cpuPerMsg := map[int][]float64{}, map[int][]float64{}
	// The sizes take turns, three rounds, as in BenchmarkClaimShapes.
	for round := range 3 {
		for _, limit := range limits {
			b.Run(fmt.Sprintf("limit=%d/round=%d", limit, round+1), func(b *testing.B) {
				r := ld.runLimit(b, limit)
				us := float64(r.elapsed.Microseconds()) / float64(max(r.claimed, 1))
				cpu := float64(r.cpu.Microseconds()) / float64(max(r.claimed, 1))
				if b.N > 1 {
					perMsg[limit] = append(perMsg[limit], us)
					cpuPerMsg[limit] = append(cpuPerMsg[limit], cpu)
				}
				b.ReportMetric(us, "us/msg")
				b.ReportMetric(cpu, "cpu-us/msg")
				b.ReportMetric(r.rate(), "msgs/s")
			})
		}
	}
	for _, m := range []struct {
		what string
		by   map[int][]float64
	}{{"us/msg", perMsg}, {"CPU us/msg", cpuPerMsg}} {
		small, large := testenv.Median(m.by[limits[0]]), testenv.Median(m.by[limits[1]])
		if small > 0 {
			fmt.Fprintf(os.Stderr, "SQLite, 40k strict streams: %.1f %s claiming %d, %.1f claiming %d: %.2fx\n",
				small, m.what, limits[0], large, limits[1], large/small)
		}
	}
}

// BenchmarkEnqueueWriters: 8 goroutines Enqueue one message each call, on
// one stream, on eight, and unordered. SQLite runs one writer at a time,
// so this measures what the stream bookkeeping (the insert trigger) costs.
func BenchmarkEnqueueWriters(b *testing.B) {
	if os.Getenv("BACKSTOP_BENCH_SQLITE") == "" {
		b.Skip("set BACKSTOP_BENCH_SQLITE=1 to run")
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
	rates := map[string]float64{}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			s, _ := openBench(b, "")
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
						m := &outbox.Message{Destination: "d", Stream: c.stream(w), Type: "t", Payload: []byte("{}")}
						if err := s.Enqueue(context.Background(), m); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			rates[c.name] = float64(b.N) / time.Since(start).Seconds()
			b.StopTimer()
			b.ReportMetric(rates[c.name], "msgs/s")
		})
	}
	base := rates["unordered"]
	var t strings.Builder
	t.WriteString("\n| SQLite, 8 writers | msgs/s | vs unordered |\n|---|---|---|\n")
	for _, name := range []string{"unordered", "one-stream", "eight-streams"} {
		if r, ok := rates[name]; ok && base > 0 {
			fmt.Fprintf(&t, "| %s | %.0f | %.0f %% |\n", name, r, 100*r/base)
		}
	}
	fmt.Fprint(os.Stderr, t.String())
}

// BenchmarkManyWriters: 1,000 goroutines each write with Enqueue, one
// message a transaction, b.N writes in all; it reports the slowest write
// and the 99th percentile against the median. The store's writes take the
// one writer connection in the order they ask (awaitTurn); database/sql
// alone hands it to a waiter at random, and the slowest waited many times
// the median.
//
//	BACKSTOP_BENCH_SQLITE=1 go test -run '^$' -bench BenchmarkManyWriters -benchtime 10000x ./store/sqlite/
func BenchmarkManyWriters(b *testing.B) {
	if os.Getenv("BACKSTOP_BENCH_SQLITE") == "" {
		b.Skip("set BACKSTOP_BENCH_SQLITE=1 to run")
	}
	const writers = 1000
	s, _ := openBench(b, "")
	var (
		mu  sync.Mutex
		lat = make([]time.Duration, 0, b.N)
		wg  sync.WaitGroup
	)
	b.ResetTimer()
	for w := range writers {
		n := b.N / writers
		if w < b.N%writers {
			n++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n {
				t0 := time.Now()
				err := s.Enqueue(context.Background(), &outbox.Message{Destination: "d", Type: "t", Payload: []byte("{}")})
				d := time.Since(t0)
				if err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	slices.Sort(lat)
	if len(lat) == 0 {
		return
	}
	p50 := lat[len(lat)/2]
	b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
	b.ReportMetric(float64(lat[len(lat)-1])/float64(p50), "max/p50")
}
