package relay

import (
	"context"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
	"github.com/backstophq/backstop/transport"
)

// latencyPoll is the idle relay's poll interval in the latency
// benchmarks: far longer than any latency measured, so that every
// delivery is woken by the store's notification, not found by a poll.
const latencyPoll = 10 * time.Second

// BenchmarkEndToEndLatencySQLite measures how long a message takes from
// Enqueue (its own committed transaction) to the transport of an idle
// relay on a SQLite file, woken in-process by the store's notification
// (store.Notifier). Each op is one message; it reports the p50 and p99 in
// milliseconds. For example:
//
//	go test -run '^$' -bench EndToEndLatencySQLite -benchtime 500x ./relay/
func BenchmarkEndToEndLatencySQLite(b *testing.B) {
	s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "latency.db"), store.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	benchLatency(b, s)
}

// benchLatency runs an idle relay on s, which must be a store.Notifier,
// and enqueues b.N messages one at a time, each in a transaction of its
// own, timing each from just before Enqueue until the transport has it.
// Between messages it waits, untimed, until the relay has recorded the
// delivery and is idle again.
func benchLatency(b *testing.B, s store.Store) {
	if _, ok := s.(store.Notifier); !ok {
		b.Fatalf("%T does not implement store.Notifier", s)
	}
	got := make(chan uuid.UUID, 1)
	r, err := New(s, Config{
		Destinations: map[string]Destination{"noop": {Transport: transport.Func(func(_ context.Context, m *outbox.Message) error {
			got <- m.ID
			return nil
		})}},
		PollInterval: latencyPoll, MaxPollInterval: latencyPoll,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	waitIdle(b, r, 0, 0)

	lat := make([]time.Duration, 0, b.N)
	enq := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m := &outbox.Message{Destination: "noop", Stream: "s", Type: "bench", Payload: []byte(`{"n":1}`)}
		round := r.rounds.Load()
		start := time.Now()
		if err := s.Enqueue(ctx, m); err != nil {
			b.Fatal(err)
		}
		enq = append(enq, time.Since(start))
		select {
		case id := <-got:
			if id != m.ID {
				b.Fatalf("delivered %s, want %s", id, m.ID)
			}
		case <-time.After(latencyPoll):
			b.Fatalf("message %d not delivered within %v: the notification did not wake the relay", i, latencyPoll)
		}
		lat = append(lat, time.Since(start))
		b.StopTimer()
		waitIdle(b, r, int64(i+1), round)
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(lat)
	slices.Sort(enq)
	b.ReportMetric(ms(percentile(lat, 50)), "p50-ms")
	b.ReportMetric(ms(percentile(lat, 99)), "p99-ms")
	b.ReportMetric(ms(percentile(enq, 50)), "enqueue-p50-ms")
}

// waitIdle waits until r has recorded at least delivered deliveries and,
// in a round after round, waited idle.
func waitIdle(b *testing.B, r *Relay, delivered int64, round uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		r.idle.mu.Lock()
		seen := r.idle.round
		r.idle.mu.Unlock()
		if seen > round && r.stats.delivered.Load() >= delivered {
			return
		}
		if err := r.idle.wait(ctx, seen); err != nil {
			b.Fatalf("relay not idle with %d deliveries recorded: %v (stats %+v)", delivered, err, r.Stats())
		}
	}
}

// percentile returns the p-th percentile of sorted (nearest rank).
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (len(sorted)*p + 99) / 100
	return sorted[max(i-1, 0)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
