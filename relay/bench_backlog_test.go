package relay

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
)

// The backlog benchmarks answer one question: does the default relay
// deliver as fast when much waits in the outbox as when little does? Each
// iteration drains backlogDrain messages through a no-op transport from a
// shallow backlog (all of it) and from a deep one (the first
// backlogDrain of backlogDeep), in the same run, and reports both rates
// and their ratio (deep/shallow; the target is at least 0.8). For
// example:
//
//	go test -run '^$' -bench RelayThroughputBacklog -benchtime 1x ./relay/
//	BACKSTOP_BENCH_POSTGRES=1 go test -run '^$' -bench RelayThroughputBacklogPostgres -benchtime 1x ./relay/
const (
	backlogDrain = 2000
	backlogDeep  = 200000
)

// BenchmarkRelayThroughputBacklogSQLite is the backlog comparison on a SQLite file.
func BenchmarkRelayThroughputBacklogSQLite(b *testing.B) {
	benchBacklog(b, func(b *testing.B) (store.Store, func()) {
		s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "backlog.db"), store.Config{})
		if err != nil {
			b.Fatal(err)
		}
		return s, func() { s.Close() }
	})
}

// BenchmarkRelayThroughputBacklogPostgres is the backlog comparison on PostgreSQL
// (BACKSTOP_BENCH_POSTGRES=1; see bench_postgres_test.go).
func BenchmarkRelayThroughputBacklogPostgres(b *testing.B) {
	url := benchPostgresURL(b)
	benchBacklog(b, func(b *testing.B) (store.Store, func()) { return benchPostgresStore(b, url) })
}

func benchBacklog(b *testing.B, open func(*testing.B) (store.Store, func())) {
	for _, bc := range []struct {
		name    string
		streams int
	}{{"unordered", 0}, {"100-streams", 100}} {
		b.Run(bc.name, func(b *testing.B) {
			var shallow, deep time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				for _, depth := range []int{backlogDrain, backlogDeep} {
					s, closeStore := open(b)
					benchEnqueue(b, s, depth, bc.streams)
					b.StartTimer()
					took := benchDrain(b, s, backlogDrain)
					b.StopTimer()
					closeStore()
					if depth == backlogDrain {
						shallow += took
					} else {
						deep += took
					}
				}
				b.StartTimer()
			}
			shallowRate := float64(backlogDrain*b.N) / shallow.Seconds()
			deepRate := float64(backlogDrain*b.N) / deep.Seconds()
			b.ReportMetric(shallowRate, "shallow-msgs/s")
			b.ReportMetric(deepRate, "deep-msgs/s")
			b.ReportMetric(deepRate/shallowRate, "deep/shallow")
		})
	}
}

// benchDrain runs a relay with the default Config on s until n messages
// have reached the transport, and returns how long that took from the
// start of Run.
func benchDrain(b *testing.B, s store.Store, n int) time.Duration {
	delivered, _, _ := drainRelay(b, s, n, 5*time.Minute)
	return delivered
}
