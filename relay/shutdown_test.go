package relay

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/backstophq/backstop/outbox"
)

func TestShutdownFinishesDeliveriesAndReleasesTheRest(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var msgs []*outbox.Message
	for i := range 4 {
		msgs = append(msgs, msg("orders", fmt.Sprint(i), i))
	}
	e.enqueue(msgs...)
	rec, started, proceed := firstHangs()
	cfg := e.config(map[string]Destination{"orders": {Transport: rec.transport()}})
	cfg.Workers, cfg.BatchSize = 1, 4
	r := e.newRelay(cfg)
	r.hooks.onShutdown = func() { close(proceed) } // the delivery ends during shutdown
	rn := e.run(r)
	<-started
	if err := rn.stop(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if got := rec.got(); len(got) != 1 {
		t.Fatalf("deliveries = %v: a message started after shutdown began", got)
	}
	if e.get(msgs[0].ID) != nil {
		t.Fatal("the delivery in progress was not recorded")
	}
	for _, m := range msgs[1:] {
		got := e.get(m.ID)
		if got == nil || got.InstanceID != "" || !got.LeaseExpiry.IsZero() || got.Attempts != 0 {
			t.Fatalf("unstarted message after shutdown = %+v", got)
		}
	}
	if s := r.Stats(); s.Delivered != 1 || s.Released != 3 || s.InFlight != 0 {
		t.Fatalf("stats = %+v", s)
	}
	if err := r.Run(context.Background()); !errors.Is(err, ErrAlreadyRun) {
		t.Fatalf("second Run = %v", err)
	}
}

func TestShutdownTimeoutCancelsDeliveries(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := msg("orders", "s", 1)
	e.enqueue(m)
	started := make(chan struct{})
	rec := &recorder{fn: func(ctx context.Context, _ *outbox.Message, _ int) error {
		close(started)
		<-ctx.Done()
		return fmt.Errorf("gave up: %w", ctx.Err())
	}}
	cfg := e.config(map[string]Destination{"orders": {Transport: rec.transport(), Timeout: time.Hour}})
	cfg.ShutdownTimeout = 10 * time.Second
	r := e.newRelay(cfg)
	r.hooks.onShutdown = func() { e.clk.Advance(10 * time.Second) }
	rn := e.run(r)
	<-started
	if err := rn.stop(); err != nil {
		t.Fatalf("Run = %v", err)
	}
	got := e.get(m.ID)
	if got == nil || got.InstanceID != "" || got.Attempts != 0 || len(e.deadLetters()) != 0 {
		t.Fatalf("cancelled message = %+v", got)
	}
	if s := r.Stats(); s.Released != 1 || s.Failed != 0 || s.Destinations["orders"].BreakerTrips != 0 {
		t.Fatalf("stats = %+v", s)
	}
	if len(e.logs.find("shutdown timeout reached")) != 1 {
		t.Fatal("the cancellation was not logged")
	}
}

func TestShutdownAbandonsDeliveriesThatIgnoreCancellation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := msg("orders", "s", 1)
	e.enqueue(m)
	started, never := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(never) })
	rec := &recorder{fn: func(context.Context, *outbox.Message, int) error {
		close(started)
		<-never
		return nil
	}}
	cfg := e.config(map[string]Destination{"orders": {Transport: rec.transport(), Timeout: time.Hour}})
	cfg.ShutdownTimeout = 10 * time.Second
	r := e.newRelay(cfg)
	r.hooks.onShutdown = func() { e.clk.Advance(10 * time.Second) } // the deadline: cancel
	r.hooks.onCancel = func() { e.clk.Advance(cancelGrace) }        // the grace period runs out
	rn := e.run(r)
	<-started
	if err := rn.stop(); err == nil {
		t.Fatal("Run = nil after abandoning a delivery")
	}
	if got := e.get(m.ID); got == nil || got.InstanceID != "" || got.Attempts != 0 {
		t.Fatalf("abandoned message = %+v", got)
	}
}

func TestLeaseIsRenewedAndItsLossLogged(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := msg("orders", "s", 1)
	e.enqueue(m)
	started, proceed := make(chan struct{}), make(chan struct{})
	rec := &recorder{fn: func(context.Context, *outbox.Message, int) error {
		close(started)
		<-proceed
		return nil
	}}
	rn := e.start(e.config(map[string]Destination{"orders": {Transport: rec.transport(), Timeout: time.Hour}}))
	<-started
	first := e.get(m.ID).LeaseExpiry
	e.clk.Advance(11 * time.Second) // past LeaseDuration/3
	rn.waitFor("a renewal", func() bool { return e.get(m.ID).LeaseExpiry.After(first) })

	// Another instance takes the message, as if the lease had lapsed.
	if _, err := e.s.DB().ExecContext(e.ctx, `UPDATE backstop_outbox SET instance_id = 'thief' WHERE id = ?`, m.ID.String()); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(11 * time.Second)
	rn.waitFor("the lost lease", func() bool { return rn.r.Stats().LeasesLost == 1 })
	logs := e.logs.find("lease lost; delivery continues")
	if len(logs) != 1 || logs[0].attrs["message_id"] != m.ID.String() {
		t.Fatalf("operations log = %+v", logs)
	}
	close(proceed) // the delivery goes on and its completion counts
	rn.settle()
	if e.get(m.ID) != nil {
		t.Fatal("the completion of a lost lease was not recorded")
	}
}

// TestOverdueDeliveryIsReported: a transport that ignores its context
// holds its worker past the destination's Timeout. The relay cannot stop
// it, and keeps its lease (another instance must not deliver the message
// while this one may still): it says so once, in a warning, and counts it
// in Stats().Overdue (backstop_deliveries_overdue) until it returns.
func TestOverdueDeliveryIsReported(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := msg("orders", "a", 1)
	e.enqueue(m)
	rec, started, release := firstHangs() // it ignores its context
	cfg := e.config(map[string]Destination{"orders": {Transport: rec.transport(), Timeout: 10 * time.Second}})
	cfg.Workers = 1
	rn := e.start(cfg)
	<-started
	if n := rn.r.Stats().Overdue; n != 0 {
		t.Fatalf("overdue at the start: %d", n)
	}
	e.clk.Advance(16 * time.Second) // past Timeout + 5 s, and a renewal is due
	rn.waitFor("the delivery counted overdue", func() bool { return rn.r.Stats().Overdue == 1 })
	e.clk.Advance(11 * time.Second)
	before := rn.r.rounds.Load()
	rn.waitFor("another renewal", func() bool { return rn.r.rounds.Load() > before+1 })
	if got := e.logs.find("delivery overdue"); len(got) != 1 {
		t.Fatalf("%d overdue warnings, want one: %+v", len(got), got)
	}
	if rn.r.Stats().Overdue != 1 || e.get(m.ID).InstanceID == "" {
		t.Fatalf("while it runs: stats %+v, message %+v; want it overdue and still leased", rn.r.Stats(), e.get(m.ID))
	}
	close(release)
	rn.waitFor("the delivery recorded", func() bool { return rn.r.Stats().Delivered == 1 })
	e.clk.Advance(11 * time.Second)
	rn.waitFor("no delivery overdue", func() bool { return rn.r.Stats().Overdue == 0 })
}
