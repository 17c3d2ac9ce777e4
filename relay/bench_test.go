package relay

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
	"github.com/backstophq/backstop/transport"
)

// BenchmarkRelayThroughput delivers 10,000 messages through a no-op Func
// transport from a SQLite file on the wall clock, and reports messages per
// second from the start of Run until every outcome is recorded.
func BenchmarkRelayThroughput(b *testing.B) {
	for _, bc := range []struct {
		name    string
		streams int // 0: no streams
	}{{"unordered", 0}, {"100-streams", 100}} {
		b.Run(bc.name, func(b *testing.B) {
			const n = 10000
			var total time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				s, msgs := benchStore(b, n, bc.streams)
				b.StartTimer()
				total += benchRun(b, s, len(msgs))
				b.StopTimer()
				s.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(n*b.N)/total.Seconds(), "msgs/s")
		})
	}
}

func benchStore(b *testing.B, n, streams int) (*sqlite.Store, []*outbox.Message) {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "bench.db"), store.Config{})
	if err != nil {
		b.Fatal(err)
	}
	msgs := make([]*outbox.Message, n)
	for i := range msgs {
		stream := ""
		if streams > 0 {
			stream = fmt.Sprintf("s%d", i%streams)
		}
		msgs[i] = &outbox.Message{Destination: "noop", Stream: stream, Type: "bench", Payload: []byte(`{"n":1}`)}
	}
	for i := 0; i < n; i += 1000 {
		if err := s.Enqueue(ctx, msgs[i:min(i+1000, n)]...); err != nil {
			b.Fatal(err)
		}
	}
	return s, msgs
}

// benchRun runs a relay with the default Config on s until n messages
// are delivered and recorded, and returns how long that took.
func benchRun(b *testing.B, s store.Store, n int) time.Duration {
	_, stopped, r := drainRelay(b, s, n, time.Minute)
	if got := r.Stats().Delivered; got != int64(n) {
		b.Fatalf("recorded %d deliveries, want %d", got, n)
	}
	return stopped
}

// drainRelay runs a relay with the default Config on s until n messages
// have reached the transport, then stops it. It returns how long after
// the start of Run the last delivery came and the relay had stopped
// (everything recorded).
func drainRelay(b *testing.B, s store.Store, n int, timeout time.Duration) (delivered, stopped time.Duration, r *Relay) {
	var count atomic.Int64
	all := make(chan struct{})
	r, err := New(s, Config{
		Destinations: map[string]Destination{"noop": {Transport: transport.Func(func(context.Context, *outbox.Message) error {
			if count.Add(1) == int64(n) {
				close(all)
			}
			return nil
		})}},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- r.Run(ctx) }()
	select {
	case <-all:
	case <-time.After(timeout):
		b.Fatalf("delivered %d of %d", count.Load(), n)
	}
	delivered = time.Since(start)
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	return delivered, time.Since(start), r
}
