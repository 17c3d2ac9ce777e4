package relay

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"strings"
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
		name    string
		small   int
		headers bool
	}{{"large", 0, false}, {"small-then-large", 2000, false}, {"headers-at-limit", 0, true}} {
		b.Run(bc.name, func(b *testing.B) {
			var held float64
			for i := 0; i < b.N; i++ {
				held += prefetchHeap(b, bc.small, bc.headers)
			}
			held /= float64(b.N)
			b.ReportMetric(held/(1<<20), "held-MiB")
			b.ReportMetric(held/heapBudget, "held/budget")
		})
	}
}

const (
	heapBudget  = 16 << 20
	heapLarge   = 100
	heapHeaders = 3000
)

// atLimitHeaders are outbox.DefaultMaxHeaders headers whose names and
// values add up to outbox.DefaultMaxHeaderBytes.
func atLimitHeaders() map[string]string {
	h := make(map[string]string, outbox.DefaultMaxHeaders)
	each := outbox.DefaultMaxHeaderBytes / outbox.DefaultMaxHeaders
	for i := range outbox.DefaultMaxHeaders {
		name := fmt.Sprintf("x-h%02d", i)
		h[name] = strings.Repeat("v", each-len(name))
	}
	return h
}

// prefetchHeap enqueues small tiny messages then heapLarge of 1 MiB (with
// headers, heapHeaders messages of 1 KiB with headers at their limits:
// 64 of them, 16 KiB), runs a relay whose deliveries hang, and returns
// the heap it holds once it has claimed what it will.
func prefetchHeap(b *testing.B, small int, headers bool) float64 {
	b.StopTimer()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "heap.db"), store.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	benchEnqueueFor(b, s, "big", small, 0)
	payload := make([]byte, outbox.DefaultMaxPayloadBytes-64)
	n, per, batch := heapLarge, 10, 256
	if headers {
		// enough held for the budget, not the batch, to bind
		payload = payload[:1024]
		n, per, batch = heapHeaders, 100, 2048
	}
	for i := 0; i < n; i += per {
		var ms []*outbox.Message
		for range per {
			m := &outbox.Message{Destination: "big", Type: "bench", Payload: payload}
			if headers {
				m.Headers = atLimitHeaders()
			}
			ms = append(ms, m)
		}
		if err := s.Enqueue(ctx, ms...); err != nil {
			b.Fatal(err)
		}
	}
	hang := make(chan struct{})
	r, err := New(s, Config{
		Destinations: map[string]Destination{"big": {Transport: transport.Func(func(ctx context.Context, m *outbox.Message) error {
			if len(m.Payload) < 1024 && len(m.Headers) == 0 {
				return nil
			}
			select {
			case <-hang:
			case <-ctx.Done():
			}
			return nil
		}), Timeout: time.Hour}},
		Workers:         4,
		BatchSize:       batch,
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
