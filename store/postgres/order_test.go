package postgres

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

type noDelay struct{}

func (noDelay) Delay(int) time.Duration { return 0 }

// TestStreamOrderUnderConcurrentInstances runs instances on two pools (as
// two processes would) that claim, deliver in order, fail at random and
// release the rest of a failed stream, as the relay does. Every message
// must be delivered exactly once, and each strict stream in seq order.
func TestStreamOrderUnderConcurrentInstances(t *testing.T) {
	schema := newSchema(t)
	cfg := store.Config{DefaultPolicy: store.Policy{Strategy: noDelay{}, MaxAttempts: 1000}}
	var stores []*Store
	for range 2 {
		s, err := New(schemaPool(t, schema, 4), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		stores = append(stores, s)
	}
	const streams, total = 12, 600
	var all []*outbox.Message
	for i := range total {
		stream := fmt.Sprintf("s%d", i%streams)
		if i%10 == 0 {
			stream = "" // unordered
		}
		all = append(all, &outbox.Message{Destination: "d", Stream: stream, Type: "t"})
	}
	ctx := context.Background()
	if err := stores[0].Enqueue(ctx, all...); err != nil {
		t.Fatal(err)
	}
	var (
		mu        sync.Mutex
		delivered = map[uuid.UUID]bool{}
		logs      = map[string][]int64{}
		wg        sync.WaitGroup
	)
	deadline := time.Now().Add(60 * time.Second)
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stores[w%len(stores)]
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			b := &store.Batch{Instance: store.Instance{ID: fmt.Sprintf("w%d", w)}}
			for time.Now().Before(deadline) {
				b.Claim.Limit = 1 + rng.IntN(15)
				r, err := s.ProcessBatch(ctx, b)
				if err != nil {
					t.Error(err)
					return
				}
				*b = store.Batch{Instance: b.Instance}
				failed := map[string]bool{}
				mu.Lock()
				for _, m := range r.Claimed {
					switch {
					case m.Stream != "" && failed[m.Stream]:
						b.Completions = append(b.Completions, store.Completion{ID: m.ID})
					case rng.IntN(8) == 0:
						failed[m.Stream] = m.Stream != ""
						b.Failures = append(b.Failures, store.Failure{ID: m.ID, Error: "flaky"})
					default:
						if delivered[m.ID] {
							t.Errorf("%s delivered twice", m.ID)
						}
						delivered[m.ID] = true
						logs[m.Stream] = append(logs[m.Stream], m.Seq)
						b.Completions = append(b.Completions, store.Completion{ID: m.ID, Status: outbox.StatusPublished})
					}
				}
				done := len(delivered) == total
				mu.Unlock()
				if done && len(r.Claimed) == 0 {
					return
				}
			}
			t.Errorf("w%d: outbox not drained in time", w)
		}()
	}
	wg.Wait()
	if len(delivered) != total {
		t.Fatalf("delivered %d of %d", len(delivered), total)
	}
	for stream, seqs := range logs {
		if stream == "" {
			continue
		}
		for i := 1; i < len(seqs); i++ {
			if seqs[i] <= seqs[i-1] {
				t.Fatalf("stream %s delivered out of order: %v", stream, seqs)
			}
		}
	}
}
