package natstransport_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop/errorhandling"
	natstransport "github.com/backstophq/backstop/transport/nats"
)

// TestStreamDeletedAndCreatedAgainWhilePublishing: an operator deletes
// the stream while messages are being published and creates it again.
// Every Deliver returns within the Timeout, each failure is the
// destination's transient fault, and every message, published again as
// the relay would, is in the new stream once it exists, once.
func TestStreamDeletedAndCreatedAgainWhilePublishing(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	prefix := unique("bt")
	cfg := jetstream.StreamConfig{Name: strings.ToUpper(prefix), Subjects: []string{prefix + ".>"}, Storage: jetstream.MemoryStorage}
	ctx := ctxFor(t)
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), cfg.Name) })
	tr := newTransport(t, natstransport.Config{Subject: prefix + ".{type}", Timeout: 2 * time.Second})

	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed = map[string]int{}
		ids    = map[string]bool{}
		faults = make(chan struct{}, 1)
		stop   atomic.Bool
	)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				m := message(t)
				m.Stream = "s" + string(rune('0'+w))
				for {
					start := time.Now()
					err := tr.Deliver(ctx, m)
					if took := time.Since(start); took > 5*time.Second {
						t.Errorf("Deliver took %v", took)
					}
					if err == nil {
						break
					}
					v := errorhandling.NewErrorClassifier().Classify(err)
					if v.Class != errorhandling.ClassTransient || v.Blame != errorhandling.BlameDestination {
						t.Errorf("Deliver: %v classified %v, %v; want a transient fault of the destination", err, v.Class, v.Blame)
						return
					}
					mu.Lock()
					failed[v.Code]++
					mu.Unlock()
					select {
					case faults <- struct{}{}:
					default:
					}
					if ctx.Err() != nil {
						return
					}
				}
				mu.Lock()
				ids[m.ID.String()] = true
				mu.Unlock()
			}
		}()
	}
	for range 3 {
		if err := js.DeleteStream(ctx, cfg.Name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Fatal(err)
		}
		select { // a publish met the missing stream
		case <-faults:
		case <-ctx.Done():
			t.Fatal("no Deliver failed while the stream was deleted")
		}
		if _, err := js.CreateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("faults while the stream was away: %v", failed)
	// The messages confirmed by a stream since deleted went with it; none
	// is stored twice.
	s, err := js.Stream(ctx, cfg.Name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs > uint64(len(ids)) {
		t.Fatalf("stream holds %d messages, more than the %d published", info.State.Msgs, len(ids))
	}
}
