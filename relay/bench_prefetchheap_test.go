package relay

import (
	"context"
	"log/slog"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
	"github.com/backstophq/backstop/transport"
)

// BenchmarkPrefetchHeap measures the live heap a relay keeps while its
// deliveries hang over a deep backlog of 1 MiB payloads (alone, and after
// a run of small messages), against PrefetchBytes: held-MiB is the heap
// in use after a collection, less what it was before Run, and
// held/budget their ratio (about 1 is the bound kept). Run it with
//
//	go test -run '^$' -bench PrefetchHeap -benchtime 1x ./relay/
func BenchmarkPrefetchHeap(b *testing.B) {
	for _, bc := range []struct {
		name  string
		small int
	}{{"large", 0}, {"small-then-large", 2000}} {
		b.Run(bc.name, func(b *testing.B) {
			var held float64
			for i := 0; i < b.N; i++ {
				held += prefetchHeap(b, bc.small)
			}
			held /= float64(b.N)
			b.ReportMetric(held/(1<<20), "held-MiB")
			b.ReportMetric(held/heapBudget, "held/budget")
		})
	}
}

const (
	heapBudget = 16 << 20
	heapLarge  = 100
)

// prefetchHeap enqueues small tiny messages then heapLarge of 1 MiB, runs a
// relay whose deliveries hang, and returns the heap it holds once it has
// claimed what it will.
func prefetchHeap(b *testing.B, small int) float64 {
	b.StopTimer()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "heap.db"), store.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	benchEnqueueFor(b, s, "big", small, 0)
	payload := make([]byte, outbox.DefaultMaxPayloadBytes-64)
	for i := 0; i < heapLarge; i += 10 {
		var ms []*outbox.Message
		for range 10 {
			ms = append(ms, &outbox.Message{Destination: "big", Type: "bench", Payload: payload})
		}
		if err := s.Enqueue(ctx, ms...); err != nil {
			b.Fatal(err)
		}
	}
	hang := make(chan struct{})
	r, err := New(s, Config{
		Destinations: map[string]Destination{"big": {Transport: transport.Func(func(ctx context.Context, m *outbox.Message) error {
			if len(m.Payload) < 1024 {
				return nil
			}
			select {
			case <-hang:
			case <-ctx.Done():
			}
			return nil
		}), Timeout: time.Hour}},
		Workers:         4,
		BatchSize:       256,
		PrefetchBytes:   heapBudget,
		PollInterval:    MinPollInterval,
		MaxPollInterval: 5 * MinPollInterval,
		Logger:          slog.New(slog.DiscardHandler),
	})
	if err != nil {
		b.Fatal(err)
	}
	payload = nil
	base := liveHeap()
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	b.StartTimer()
	go func() { done <- r.Run(runCtx) }()
	// Every small message delivered, then rounds enough to settle on what
	// the large ones leave room for.
	for r.Stats().Delivered < int64(small) {
		before := r.rounds.Load()
		_ = r.turned.wait(ctx, before)
	}
	for range 20 {
		before := r.rounds.Load()
		_ = r.turned.wait(ctx, before)
	}
	b.StopTimer()
	held := float64(liveHeap() - base)
	close(hang)
	cancel()
	<-done
	return held
}

// liveHeap is the heap in use after a collection.
func liveHeap() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}
