package relay

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop/outbox"
)

// TestSlowDestinationDoesNotDelayAFastOne: a hundred messages for a
// destination whose deliveries hang wait ahead of ten for a fast one.
// The claim caps each destination's share, so the fast destination's
// messages are claimed and delivered while the slow one's still hang.
func TestSlowDestinationDoesNotDelayAFastOne(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withOrdering(outbox.OrderingNone))
	var slow []*outbox.Message
	for i := range 100 {
		slow = append(slow, msg("slow", fmt.Sprintf("s%d", i), i))
	}
	e.enqueue(slow...)
	var fast []*outbox.Message
	for i := range 10 {
		fast = append(fast, msg("fast", fmt.Sprintf("f%d", i), i))
	}
	e.enqueue(fast...)
	release := make(chan struct{})
	hang := &recorder{fn: func(ctx context.Context, _ *outbox.Message, _ int) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}}
	var quick atomic.Int64
	rec := &recorder{fn: func(context.Context, *outbox.Message, int) error { quick.Add(1); return nil }}
	cfg := e.config(map[string]Destination{
		"slow": {Transport: hang.transport(), Concurrency: 2},
		"fast": {Transport: rec.transport(), Concurrency: 2},
	})
	cfg.Workers = 4
	rn := e.start(cfg)
	rn.waitFor("the fast destination's messages", func() bool { return rn.r.Stats().Destinations["fast"].Delivered == 10 })
	if n := len(hang.got()); n > 2 {
		t.Fatalf("%d slow deliveries started, want at most its concurrency (2)", n)
	}
	close(release)
	rn.waitFor("every message", func() bool { return rn.r.Stats().Delivered == 110 })
	for _, m := range append(slow, fast...) {
		if e.get(m.ID) != nil {
			t.Fatalf("%s not delivered", m.Payload)
		}
	}
}

// TestHangingDestinationLeavesWorkersForAnotherWithDefaults: the same with
// the default configuration, where every destination may use every
// worker. The hanging destination's hundred messages are claimed first and
// would take all sixteen workers for their whole timeout; the scheduler
// keeps a quarter of the pool for a destination under its share, so the
// fast destination's twenty are delivered while the slow ones still hang.
func TestHangingDestinationLeavesWorkersForAnotherWithDefaults(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withOrdering(outbox.OrderingNone))
	var slow []*outbox.Message
	for i := range 100 {
		slow = append(slow, msg("slow", fmt.Sprintf("s%d", i), i))
	}
	e.enqueue(slow...)
	var fast []*outbox.Message
	for i := range 20 {
		fast = append(fast, msg("fast", fmt.Sprintf("f%d", i), i))
	}
	e.enqueue(fast...)
	release := make(chan struct{})
	hang := &recorder{fn: func(ctx context.Context, _ *outbox.Message, _ int) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}}
	rec := &recorder{}
	cfg := e.config(map[string]Destination{
		"slow": {Transport: hang.transport()},
		"fast": {Transport: rec.transport()},
	})
	rn := e.start(cfg)
	rn.waitFor("the fast destination's messages", func() bool { return rn.r.Stats().Destinations["fast"].Delivered == 20 })
	if n, most := len(hang.got()), DefaultWorkers-DefaultWorkers/4; n > most {
		t.Fatalf("%d slow deliveries started, want at most %d: the rest of the pool is kept for others", n, most)
	}
	close(release)
	rn.waitFor("every message", func() bool { return rn.r.Stats().Delivered == 120 })
}

// TestSchedulerGivesFreedWorkersToTheDestinationUnderItsShare: once the
// pool is full, a worker freed by the destination holding most of it goes
// to the one under its share, until both hold half.
func TestSchedulerGivesFreedWorkersToTheDestinationUnderItsShare(t *testing.T) {
	slow, fast := &destination{name: "slow", concurrency: 16}, &destination{name: "fast", concurrency: 16}
	s := newScheduler([]*destination{fast, slow}, 16, nil)
	for range 40 {
		s.push(&task{dest: slow})
	}
	var held []*task
	for range 12 {
		tk, _ := s.take()
		held = append(held, tk)
	}
	if slow.running != 12 {
		t.Fatalf("slow runs %d, want 12 (the pool less a quarter)", slow.running)
	}
	for range 40 {
		s.push(&task{dest: fast})
	}
	for range 4 {
		if tk, _ := s.take(); tk.dest != fast {
			t.Fatal("a reserved worker went to the destination over its share")
		}
	}
	// Slow deliveries end one by one: each freed worker goes to fast until
	// both hold eight.
	for i := range 4 {
		s.done(held[i])
		if tk, _ := s.take(); tk.dest != fast {
			t.Fatalf("freed worker %d went to %s, want fast (running %d, slow %d)", i, tk.dest.name, fast.running, slow.running)
		}
	}
	if slow.running != 8 || fast.running != 8 {
		t.Fatalf("running slow %d, fast %d; want 8 and 8", slow.running, fast.running)
	}
	s.done(held[4])
	if tk, _ := s.take(); tk.dest != slow {
		t.Fatalf("at equal shares the freed worker went to %s, want slow (fast holds its share)", tk.dest.name)
	}
}

// TestSlowDestinationLeasesItsOwnPace: beside a fast destination that grew
// the prefetch to its most, a destination delivering ten messages a second
// gets room for what it delivers in half a second (at least four times its
// Concurrency), not an equal share of the prefetch: that share was 2,048
// messages, over three minutes of its work leased by one relay of a fleet.
func TestSlowDestinationLeasesItsOwnPace(t *testing.T) {
	e := newEnv(t)
	r := e.newRelay(e.config(map[string]Destination{
		"slow": {Transport: (&recorder{}).transport(), Concurrency: 2},
		"fast": {Transport: (&recorder{}).transport()},
	}))
	l := newLoop(r)
	l.pf.rate = 100_000 // the fast destination's pace
	l.observePaces(e.clk.Now())
	r.dests["fast"].stats.delivered.Add(5000)
	r.dests["slow"].stats.delivered.Add(1)
	e.clk.Advance(100 * time.Millisecond)
	l.observePaces(e.clk.Now())
	caps := l.perDestination()
	if got, want := caps["fast"], DefaultMaxBatchSize/2; got != want {
		t.Errorf("fast destination's room %d, want an equal share of the prefetch (%d)", got, want)
	}
	if got := caps["slow"]; got != 8 {
		t.Errorf("slow destination's room %d, want 8: four times its Concurrency, over the 5 it delivers in half a second", got)
	}
}
