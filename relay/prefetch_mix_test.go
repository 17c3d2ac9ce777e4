package relay

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// TestPrefetchBytesHoldAfterSmallMessages: a backlog of small messages
// followed by large ones, deliveries hanging. The relay's estimate of a
// message's size comes from what it claimed, so after small messages it
// asks for its whole target; the claim brought back 4.3 times
// PrefetchBytes before it stopped at the bytes the budget leaves. Neither
// one claim's result nor what the relay keeps to deliver may pass the
// budget.
func TestPrefetchBytesHoldAfterSmallMessages(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		ordering outbox.Ordering
		streams  int
		unbound  bool
	}{
		{"unordered", outbox.OrderingNone, 0, false},
		{"strict", outbox.OrderingStrict, 40, false},
		// A store that does not bound its claims by bytes (a custom one):
		// the relay gives back what passes the budget, and keeps to deliver
		// at most the budget and the claim's first message.
		{"unordered, a store without MaxBytes", outbox.OrderingNone, 0, true},
		{"strict, a store without MaxBytes", outbox.OrderingStrict, 40, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			prefetchAfterSmall(t, tc.ordering, tc.streams, tc.unbound)
		})
	}
}

func prefetchAfterSmall(t *testing.T, ordering outbox.Ordering, streams int, unbound bool) {
	e := newEnv(t, withOrdering(ordering))
	const payload = 100 << 10
	const budget = 1 << 20
	stream := func(i int) string {
		if streams == 0 {
			return ""
		}
		return fmt.Sprintf("s%d", i%streams)
	}
	var msgs []*outbox.Message
	for i := range 20 {
		msgs = append(msgs, msg("orders", stream(i), i))
	}
	for i := range 60 {
		m := msg("orders", stream(i), 100+i)
		m.Payload = append(m.Payload, make([]byte, payload-len(m.Payload))...)
		msgs = append(msgs, m)
	}
	for _, m := range msgs {
		e.enqueue(m) // one at a time: in Seq order, small first
	}
	release := make(chan struct{})
	rec := &recorder{fn: func(ctx context.Context, _ *outbox.Message, _ int) error {
		<-release
		return nil
	}}
	cfg := e.config(map[string]Destination{"orders": {Transport: rec.transport(), Timeout: time.Hour}})
	cfg.Workers = 2
	cfg.BatchSize = 64
	cfg.PrefetchBytes = budget
	cfg.NoFleet = true
	meter := &claimMeter{Store: e.s, unbound: unbound}
	r, err := New(meter, cfg)
	if err != nil {
		t.Fatal(err)
	}
	rn := e.run(r)
	var most int64
	for range 6 {
		before := rn.r.rounds.Load()
		rn.waitFor("a round", func() bool { return rn.r.rounds.Load() > before+1 })
		most = max(most, heldForDelivery(rn.r))
	}
	close(release)
	rn.waitFor("every message", func() bool { return rn.r.Stats().Delivered == int64(len(msgs)) })
	for _, m := range msgs {
		if n := rec.count(string(m.Payload)); n != 1 {
			t.Fatalf("%.20s delivered %d times", m.Payload, n)
		}
	}
	allowed := int64(budget)
	if unbound {
		allowed += payload + messageOverhead // a claim's first message of any size
	}
	if most > allowed {
		t.Fatalf("held %d bytes to deliver (%.1f× PrefetchBytes %d) after a run of small messages", most, float64(most)/budget, budget)
	}
	if unbound {
		if n := meter.most.Load(); n <= budget {
			t.Fatalf("the largest claim brought back %d bytes: the store bounded it after all, and the relay's give-back went untried", n)
		}
		return
	}
	if n := meter.most.Load(); n > budget {
		t.Fatalf("a claim brought back %d bytes (%.1f× PrefetchBytes %d) after a run of small messages", n, float64(n)/budget, budget)
	}
}

// claimMeter is a store that keeps the largest bytes (messageBytes) one
// claim brought back; unbound, it claims without the relay's
// ClaimRequest.MaxBytes.
type claimMeter struct {
	store.Store
	unbound bool
	most    atomic.Int64
}

func (c *claimMeter) ProcessBatch(ctx context.Context, b *store.Batch) (*store.Result, error) {
	if c.unbound {
		b.Claim.MaxBytes, b.Claim.FirstAnySize = 0, false
	}
	res, err := c.Store.ProcessBatch(ctx, b)
	if err == nil {
		var n int64
		for _, m := range res.Claimed {
			n += messageBytes(m)
		}
		for {
			most := c.most.Load()
			if n <= most || c.most.CompareAndSwap(most, n) {
				break
			}
		}
	}
	return res, err
}

// heldForDelivery is the bytes of the messages r holds to deliver: every
// flight but those whose lease is being given back.
func heldForDelivery(r *Relay) int64 {
	r.fl.mu.Lock()
	defer r.fl.mu.Unlock()
	var n int64
	for _, f := range r.fl.m {
		if !f.reported {
			n += f.bytes
		}
	}
	return n
}
