package relay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/postgres"
)

// The PostgreSQL benchmarks run only with BACKSTOP_BENCH_POSTGRES=1,
// against the server at BACKSTOP_TEST_POSTGRES_URL (by default
// postgres://postgres@127.0.0.1:5432/test?sslmode=disable), each store in
// a schema of its own, dropped afterwards. For example:
//
//	BACKSTOP_BENCH_POSTGRES=1 go test -run '^$' \
//	    -bench 'RelayThroughputPostgres|EndToEndLatencyPostgres' -benchtime 3x ./relay/
//
// (-benchtime counts throughput runs of 10,000 messages and latency
// messages alike: use 500x for the latency figures.)

var _ store.Notifier = (*postgres.Store)(nil) // the relay subscribes: LISTEN/NOTIFY

// BenchmarkRelayThroughputPostgres is BenchmarkRelayThroughput on
// PostgreSQL: 10,000 messages through a no-op Func transport, on the
// database clock, reporting messages per second from the start of Run
// until every outcome is recorded.
func BenchmarkRelayThroughputPostgres(b *testing.B) {
	url := benchPostgresURL(b)
	for _, bc := range []struct {
		name    string
		streams int // 0: no streams
	}{{"unordered", 0}, {"100-streams", 100}} {
		b.Run(bc.name, func(b *testing.B) {
			const n = 10000
			var total time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				s, drop := benchPostgresStore(b, url)
				benchEnqueue(b, s, n, bc.streams)
				b.StartTimer()
				total += benchRun(b, s, n)
				b.StopTimer()
				drop()
				b.StartTimer()
			}
			b.ReportMetric(float64(n*b.N)/total.Seconds(), "msgs/s")
		})
	}
}

// BenchmarkEndToEndLatencyPostgres is BenchmarkEndToEndLatencySQLite on
// PostgreSQL: an idle relay woken by LISTEN/NOTIFY when a message's
// transaction commits. Each op is one message; it reports the p50 and p99
// in milliseconds from just before Enqueue to the transport.
func BenchmarkEndToEndLatencyPostgres(b *testing.B) {
	url := benchPostgresURL(b)
	b.StopTimer()
	s, drop := benchPostgresStore(b, url)
	defer drop()
	b.StartTimer()
	benchLatency(b, s)
}

// benchPostgresURL skips the benchmark unless BACKSTOP_BENCH_POSTGRES=1.
func benchPostgresURL(b *testing.B) string {
	if os.Getenv("BACKSTOP_BENCH_POSTGRES") != "1" {
		b.Skip("set BACKSTOP_BENCH_POSTGRES=1 to run against PostgreSQL")
	}
	if u := os.Getenv("BACKSTOP_TEST_POSTGRES_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// benchPostgresStore opens a migrated store on the database clock in a
// new schema; drop closes it and drops the schema.
func benchPostgresStore(b *testing.B, url string) (s *postgres.Store, drop func()) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatalf("PostgreSQL at %s: %v", url, err)
	}
	defer conn.Close(ctx)
	buf := make([]byte, 6)
	_, _ = rand.Read(buf)
	schema := "bench_" + hex.EncodeToString(buf)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		b.Fatal(err)
	}
	dropSchema := func() {
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			b.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			b.Errorf("drop schema %s: %v", schema, err)
		}
	}
	s, err = postgres.Open(ctx, url, store.Config{}, postgres.WithSchema(schema))
	if err == nil {
		err = s.Migrate(ctx)
	}
	if err != nil {
		dropSchema()
		b.Fatal(err)
	}
	return s, func() {
		_ = s.Close()
		dropSchema()
	}
}

// benchEnqueue writes n messages, in 100 streams or none, 1,000 a
// transaction.
func benchEnqueue(b *testing.B, s store.Store, n, streams int) {
	msgs := make([]*outbox.Message, n)
	for i := range msgs {
		stream := ""
		if streams > 0 {
			stream = fmt.Sprintf("s%d", i%streams)
		}
		msgs[i] = &outbox.Message{Destination: "noop", Stream: stream, Type: "bench", Payload: []byte(`{"n":1}`)}
	}
	for i := 0; i < n; i += 1000 {
		if err := s.Enqueue(context.Background(), msgs[i:min(i+1000, n)]...); err != nil {
			b.Fatal(err)
		}
	}
}
