package relay

import (
	"context"
	"testing"
	"time"

	"github.com/backstophq/backstop/outbox"
)

func TestPrefetchFollowsTheDeliveryRate(t *testing.T) {
	t.Parallel()
	cfg := &Config{Workers: 16, BatchSize: 256, MaxBatchSize: 4096, PrefetchBytes: DefaultPrefetchBytes}
	at := func(d time.Duration) time.Time { return epoch.Add(d) }
	for _, tc := range []struct {
		name string
		obs  []struct {
			at    time.Duration
			ended uint64
		}
		want int
	}{
		{"nothing measured", nil, 256},
		{"a window too short to measure", []struct {
			at    time.Duration
			ended uint64
		}{{50 * time.Millisecond, 1000}}, 256},
		{"fast: capped at MaxBatchSize", []struct {
			at    time.Duration
			ended uint64
		}{{100 * time.Millisecond, 2000}}, 4096},
		{"a quarter second of 8,000/s", []struct {
			at    time.Duration
			ended uint64
		}{{time.Second, 8000}}, 2000},
		{"slow: held at BatchSize", []struct {
			at    time.Duration
			ended uint64
		}{{time.Second, 100}}, 256},
		{"a rate that falls is followed", []struct {
			at    time.Duration
			ended uint64
		}{{time.Second, 8000}, {2 * time.Second, 8000}}, 1000},
		{"a clock that goes back starts a new window", []struct {
			at    time.Duration
			ended uint64
		}{{time.Second, 8000}, {-time.Hour, 9000}, {-time.Hour + 50*time.Millisecond, 1e6}}, 2000},
	} {
		p := newPrefetch(cfg, epoch)
		for _, o := range tc.obs {
			p.observe(at(o.at), o.ended)
		}
		if got := p.target(); got != tc.want {
			t.Errorf("%s: target %d, want %d", tc.name, got, tc.want)
		}
	}

	fixed := newPrefetch(&Config{Workers: 16, BatchSize: 100, MaxBatchSize: 100, PrefetchBytes: 1 << 20}, epoch)
	fixed.observe(at(time.Second), 1e6)
	if got := fixed.target(); got != 100 {
		t.Errorf("a fixed BatchSize grew to %d", got)
	}
}

func TestPrefetchRoomKeepsToTheByteBudget(t *testing.T) {
	t.Parallel()
	p := newPrefetch(&Config{Workers: 4, BatchSize: 64, MaxBatchSize: 64, PrefetchBytes: 10 << 20}, epoch)
	if got := p.room(0, 0); got != 9 {
		t.Errorf("before any claim: room %d, want 9 messages of the largest payload", got)
	}
	if got := newPrefetch(&Config{Workers: 16, BatchSize: 30, MaxBatchSize: 30, PrefetchBytes: DefaultPrefetchBytes}, epoch).room(0, 0); got != 30 {
		t.Errorf("before any claim, within the budget: room %d, want BatchSize (30)", got)
	}
	big := make([]*outbox.Message, 3)
	for i := range big {
		big[i] = &outbox.Message{Payload: make([]byte, 1<<20-messageOverhead)}
	}
	p.claimed(big)
	for _, tc := range []struct {
		held      int
		heldBytes int64
		want      int
	}{
		{0, 0, 10},
		{3, 3 << 20, 7},
		{10, 10 << 20, 0},
		{2, 12 << 20, 0},  // over the budget: none, though fewer than Workers
		{2, 9<<20 + 1, 2}, // less than a message's size left: up to Workers (the claim stops at the bytes)
		{9, 9<<20 + 1, 1}, // and past Workers, one (the claim's first may be of any size)
	} {
		if got := p.room(tc.held, tc.heldBytes); got != tc.want {
			t.Errorf("holding %d of %d bytes: room %d, want %d", tc.held, tc.heldBytes, got, tc.want)
		}
	}
	small := []*outbox.Message{{Payload: make([]byte, 100)}}
	for range 20 {
		p.claimed(small)
	}
	if got := p.room(0, 0); got != 64 {
		t.Errorf("small messages: room %d, want the target (64)", got)
	}
}

// TestPrefetchBytesBoundWhatTheRelayHolds: with deliveries hanging, a
// relay given large messages and a small PrefetchBytes holds what the
// budget allows, more than its workers, and no more.
func TestPrefetchBytesBoundWhatTheRelayHolds(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withOrdering(outbox.OrderingNone))
	const payload = 100 << 10
	per := int64(payload + messageOverhead)
	const budget = 1 << 20
	want := int(budget / per) // 10
	var msgs []*outbox.Message
	for i := range 3 * want {
		m := msg("orders", "", i)
		m.Payload = append(m.Payload, make([]byte, payload-len(m.Payload))...)
		msgs = append(msgs, m)
	}
	e.enqueue(msgs...)
	release := make(chan struct{})
	started := make(chan struct{}, len(msgs))
	rec := &recorder{fn: func(ctx context.Context, _ *outbox.Message, _ int) error {
		started <- struct{}{}
		<-release
		return nil
	}}
	cfg := e.config(map[string]Destination{"orders": {Transport: rec.transport(), Timeout: time.Hour}})
	cfg.Workers = 2
	cfg.PrefetchBytes = budget
	rn := e.start(cfg)
	<-started
	<-started
	rn.waitFor("the budget's worth held", func() bool { return rn.r.Stats().InFlight >= int64(want) })
	for range 5 {
		before := rn.r.rounds.Load()
		rn.waitFor("a round", func() bool { return rn.r.rounds.Load() > before })
		if n := rn.r.Stats().InFlight; n != int64(want) {
			t.Fatalf("holding %d messages of %d bytes with PrefetchBytes %d, want %d", n, per, budget, want)
		}
	}
	close(release)
	rn.settle()
	for _, m := range msgs {
		if n := rec.count(string(m.Payload)); n != 1 {
			t.Fatalf("a message delivered %d times", n)
		}
	}
}
