package e2e

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/relay"
	"github.com/backstophq/backstop/retry"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/transport"
)

// epoch is where the crash tests' fake clock starts (millisecond-aligned,
// as SQLite stores times).
var epoch = time.Date(2025, 3, 14, 9, 26, 53, 0, time.UTC)

// The crash tests' lease, and their relays' BatchSize.
const (
	lease     = 30 * time.Second
	batchSize = 8
)

// errCrashed is what a crashed relay process sees: its database is gone.
var errCrashed = errors.New("e2e: the relay process crashed")

// crash is the death of a relay process at a chosen moment: right after
// its transport delivered target, and before the relay could record that.
// From then on the process delivers nothing and records nothing.
type crash struct {
	target uuid.UUID
	once   sync.Once
	done   chan struct{} // closed at the crash
}

func (c *crash) happened() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// storeGone is the hook of the crashed process's store calls.
func (c *crash) storeGone() error {
	if c.happened() {
		return errCrashed
	}
	return nil
}

// transport wraps the process's transport.
func (c *crash) transport(tr transport.Transport) transport.Transport {
	return &crashingTransport{Transport: tr, c: c}
}

type crashingTransport struct {
	transport.Transport
	c *crash
}

func (t *crashingTransport) Deliver(ctx context.Context, m *outbox.Message) error {
	if t.c.happened() {
		return errorhandling.Permanent(errCrashed) // nothing leaves a dead process
	}
	err := t.Transport.Deliver(ctx, m)
	if err == nil && m.ID == t.c.target {
		t.c.once.Do(func() { close(t.c.done) })
	}
	return err
}

// TestCrashBetweenDeliveryAndCompletion makes a relay deliver a message
// and die before recording it, so that the message stays in the outbox
// under that relay's lease. A second relay instance, on a handle of its
// own, must leave the message alone while the lease holds, and send it
// again once the lease has expired (on a fake clock shared by the stores
// and the relays): at least once, at most once more. JetStream keeps it
// once, de-duplicating the re-send by Nats-Msg-Id; the other destinations
// receive it twice. Nothing is lost and every stream keeps its order.
func TestCrashBetweenDeliveryAndCompletion(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, dbk databaseKind, dk destinationKind) {
		ctx := testContext(t)
		clk := clock.NewFake(epoch)
		dest := dk.open(t)
		db := dbk.open(t, store.Config{Clock: clk, LeaseDuration: lease})
		msgs := orderMessages(t, "crash")
		if err := db.write(ctx, true, msgs); err != nil {
			t.Fatalf("application transaction: %v", err)
		}
		target := msgs[2*(streams+1)+1] // the third message of stream order-1
		sends := newSendLog()
		config := func(id string, tr transport.Transport) relay.Config {
			return relay.Config{
				Instance: store.Instance{ID: id},
				Destinations: map[string]relay.Destination{destName: {
					Transport: sends.tap(id, tr),
					InProcess: retry.NewConfig(1, nil), // one try: nothing waits on the fake clock
				}},
				Workers: 4, BatchSize: batchSize,
				PollInterval: time.Second, MaxPollInterval: 5 * time.Second,
				Clock:  clk,
				Logger: testLogger(t, slog.LevelWarn),
			}
		}

		// relay-a delivers until it has delivered the target, then dies.
		c := &crash{target: target.ID, done: make(chan struct{})}
		a := start(t, ctx, hook(db, batchSize, c.storeGone), config("relay-a", c.transport(dest.transport(t))))
		select {
		case <-c.done:
		case <-ctx.Done():
			t.Fatalf("relay-a did not deliver the target: %v (stats %+v)", ctx.Err(), a.r.Stats())
		}
		if err := a.stop(t); err == nil {
			t.Error("relay-a's Run = nil, want an error saying it could not record its outcomes")
		} else {
			t.Logf("relay-a died: %v", err)
		}
		if n := sends.count("relay-a", target.ID); n != 1 {
			t.Fatalf("relay-a sent the target %d times, want 1", n)
		}
		wantLeased(t, ctx, db, target, "relay-a", "after the crash")

		// relay-b, another process, starts while relay-a's leases hold:
		// it delivers what is free and leaves the rest.
		hb := hook(db.another(t), batchSize, nil)
		b := start(t, ctx, hb, config("relay-b", dest.transport(t)))
		hb.waitFor(t, ctx, "relay-b to go idle", func() bool { return hb.idleCalls() > 0 })
		if n := sends.count("relay-b", target.ID); n != 0 {
			t.Fatalf("relay-b sent the target %d times while relay-a's lease held", n)
		}
		wantLeased(t, ctx, db, target, "relay-a", "while the lease holds")

		// The lease expires: relay-b takes over and drains the outbox.
		clk.Advance(lease + time.Second)
		hb.poke()
		hb.waitFor(t, ctx, "the outbox to drain", func() bool {
			n, err := db.rows(ctx)
			if err != nil {
				t.Fatalf("count outbox rows: %v", err)
			}
			return n == 0
		})
		expect := sends.total() // each successful send arrives once...
		if dk.dedup {
			expect = len(msgs) // ...unless the destination drops re-sends
		}
		if _, err := dest.rec.Received(ctx, expect); err != nil {
			t.Fatalf("waiting for the deliveries: %v", err)
		}
		if err := b.stop(t); err != nil {
			t.Fatalf("graceful stop of relay-b: Run = %v", err)
		}

		got, _ := dest.rec.Received(ctx, 0)
		want := byID(msgs)
		arrived := checkIntact(t, want, got)
		checkResends(t, sends, dk.dedup, msgs, arrived)
		if n := sends.count("relay-b", target.ID); n != 1 {
			t.Errorf("relay-b sent the target %d times, want 1 (the re-send)", n)
		}
		wantTarget := 2 // relay-a's send and relay-b's re-send
		if dk.dedup {
			wantTarget = 1
		}
		if n := arrived[target.ID.String()]; n != wantTarget {
			t.Errorf("the target arrived %d times, want %d", n, wantTarget)
		}
		if len(got) != expect {
			t.Errorf("%d deliveries arrived, want %d", len(got), expect)
		}
		checkStreamOrder(t, want, got)
		if dest.stored != nil {
			if n, err := dest.stored(ctx); err != nil || n != uint64(len(msgs)) {
				t.Errorf("the destination holds %d messages (err %v), want %d: each once", n, err, len(msgs))
			}
		}
		checkDrained(t, ctx, db)
		if s := b.r.Stats(); s.Failed != 0 || s.DeadLettered != 0 || s.LeasesLost != 0 || s.InFlight != 0 {
			t.Errorf("relay-b stats = %+v, want nothing failed, dead-lettered, lost or in flight", s)
		}
		t.Logf("relay-a sent %d, relay-b %d; %d messages, %d arrivals",
			countAll(sends, "relay-a", msgs), countAll(sends, "relay-b", msgs), len(msgs), len(got))
	})
}

// wantLeased checks that m is in the outbox, undelivered, under a lease
// of instance that has not expired.
func wantLeased(t *testing.T, ctx context.Context, s store.Store, m *outbox.Message, instance, when string) {
	t.Helper()
	got, err := s.Get(ctx, m.ID)
	if err != nil {
		t.Fatalf("%s: the target is not in the outbox: %v", when, err)
	}
	now := s.Config().Clock.Now()
	if got.Status.Has(outbox.StatusPublished) || got.InstanceID != instance || !got.LeaseExpiry.After(now) {
		t.Fatalf("%s: the target has status %v, instance %q, lease expiry %v (now %v); want it undelivered, leased by %s",
			when, got.Status, got.InstanceID, got.LeaseExpiry, now, instance)
	}
}

// checkResends checks that every message was sent by relay-a, relay-b or
// both, each at most once, and arrived once per send (once in all, when
// the destination de-duplicates).
func checkResends(t *testing.T, sends *sendLog, dedup bool, msgs []*outbox.Message, arrived map[string]int) {
	t.Helper()
	for _, m := range msgs {
		a, b := sends.count("relay-a", m.ID), sends.count("relay-b", m.ID)
		want := a + b
		if dedup {
			want = 1
		}
		switch n := arrived[m.ID.String()]; {
		case a > 1 || b > 1 || a+b == 0:
			t.Errorf("message %s (stream %q, Seq %d) sent %d times by relay-a and %d by relay-b; want each at most once, one at least",
				m.ID, m.Stream, m.Seq, a, b)
		case n != want:
			t.Errorf("message %s (stream %q, Seq %d) arrived %d times, want %d (sent %d+%d)", m.ID, m.Stream, m.Seq, n, want, a, b)
		}
	}
}

// countAll returns how many sends instance made of msgs.
func countAll(sends *sendLog, instance string, msgs []*outbox.Message) int {
	n := 0
	for _, m := range msgs {
		n += sends.count(instance, m.ID)
	}
	return n
}
