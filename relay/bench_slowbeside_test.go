package relay

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
	"github.com/backstophq/backstop/transport/webhook"
)

// BenchmarkFastWebhookBesideASlowOne measures what a slow webhook
// destination costs a fast one: the fast one's rate draining
// slowBesideN messages alone, and beside a destination as deep whose
// receiver answers each request after slowAnswer, both with the relay's
// defaults, in the same run; beside/alone is the ratio (1 would be no
// cost). Run it with
//
//	go test -run '^$' -bench FastWebhookBesideASlowOne -benchtime 1x ./relay/
func BenchmarkFastWebhookBesideASlowOne(b *testing.B) {
	for _, streams := range []int{0, 50} {
		name := "unordered"
		if streams > 0 {
			name = fmt.Sprintf("%d-strict-streams", streams)
		}
		b.Run(name, func(b *testing.B) {
			var alone, beside time.Duration
			for i := 0; i < b.N; i++ {
				alone += drainFastBeside(b, streams, false)
				beside += drainFastBeside(b, streams, true)
			}
			aloneRate := float64(slowBesideN*b.N) / alone.Seconds()
			besideRate := float64(slowBesideN*b.N) / beside.Seconds()
			b.ReportMetric(aloneRate, "alone-msgs/s")
			b.ReportMetric(besideRate, "beside-msgs/s")
			b.ReportMetric(besideRate/aloneRate, "beside/alone")
		})
	}
}

const (
	slowBesideN = 3000
	slowAnswer  = 5 * time.Second
)

// drainFastBeside delivers slowBesideN messages for "fast" (in streams
// strict streams, none when 0), with as many for a slow receiver ahead of
// them when withSlow, and returns how long the fast ones took.
func drainFastBeside(b *testing.B, streams int, withSlow bool) time.Duration {
	b.StopTimer()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "beside.db"), store.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var fastN atomic.Int64
	all := make(chan struct{})
	fastSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fastN.Add(1) == slowBesideN {
			close(all)
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer fastSrv.Close()
	stop := make(chan struct{})
	slowSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t := time.NewTimer(slowAnswer)
		defer t.Stop()
		select {
		case <-t.C:
		case <-stop:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer slowSrv.Close()
	dests := map[string]Destination{"fast": {Transport: benchWebhook(b, fastSrv.URL)}}
	if withSlow {
		dests["slow"] = Destination{Transport: benchWebhook(b, slowSrv.URL)}
		benchEnqueueFor(b, s, "slow", slowBesideN, streams)
	}
	benchEnqueueFor(b, s, "fast", slowBesideN, streams)
	r, err := New(s, Config{Destinations: dests, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	b.StartTimer()
	start := time.Now()
	go func() { done <- r.Run(runCtx) }()
	select {
	case <-all:
	case <-time.After(5 * time.Minute):
		b.Fatalf("fast: %d of %d delivered", fastN.Load(), slowBesideN)
	}
	took := time.Since(start)
	b.StopTimer()
	cancel()
	close(stop)
	<-done
	b.StartTimer()
	return took
}

func benchWebhook(b *testing.B, url string) *webhook.Transport {
	tr, err := webhook.New(webhook.Config{URL: url})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tr.Close() })
	return tr
}

// benchEnqueueFor enqueues n small messages for dest, round-robin over
// streams strict streams (none when 0).
func benchEnqueueFor(b *testing.B, s store.Store, dest string, n, streams int) {
	msgs := make([]*outbox.Message, n)
	for i := range msgs {
		m := &outbox.Message{Destination: dest, Type: "bench", Payload: []byte(`{"n":1}`)}
		if streams > 0 {
			m.Stream = fmt.Sprintf("%s-%d", dest, i%streams)
			m.Ordering = outbox.OrderingStrict
		}
		msgs[i] = m
	}
	for i := 0; i < n; i += 1000 {
		if err := s.Enqueue(context.Background(), msgs[i:min(i+1000, n)]...); err != nil {
			b.Fatal(err)
		}
	}
}
