package e2e

import (
	"log/slog"
	"testing"
	"time"

	"github.com/backstophq/backstop/relay"
	"github.com/backstophq/backstop/store"
)

// TestDeliversEveryMessageOnceInStreamOrder runs a relay while the
// application commits messages in one transaction (and rolls another
// back), waits until the destination has received them all, stops the
// relay gracefully, and checks that every committed message arrived
// exactly once, intact and in stream order, that the rolled-back ones
// never did, and that the outbox and the dead-letter queue are empty.
func TestDeliversEveryMessageOnceInStreamOrder(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, dbk databaseKind, dk destinationKind) {
		ctx := testContext(t)
		dest := dk.open(t)
		db := dbk.open(t, store.Config{}) // the database's clock decides, as in production
		sends := newSendLog()
		rn := start(t, ctx, db, relay.Config{
			Instance:        store.Instance{ID: "relay-1"},
			Destinations:    map[string]relay.Destination{destName: {Transport: sends.tap("relay-1", dest.transport(t))}},
			Workers:         4,
			PollInterval:    20 * time.Millisecond,
			MaxPollInterval: 200 * time.Millisecond,
			Logger:          testLogger(t, slog.LevelWarn),
		})

		rolledBack := orderMessages(t, "rolled-back")[:6]
		if err := db.write(ctx, false, rolledBack); err != nil {
			t.Fatalf("rolled-back transaction: %v", err)
		}
		msgs := orderMessages(t, "committed")
		if err := db.write(ctx, true, msgs); err != nil {
			t.Fatalf("application transaction: %v", err)
		}
		if _, err := dest.rec.Received(ctx, len(msgs)); err != nil {
			t.Fatalf("waiting for every message: %v (stats %+v)", err, rn.r.Stats())
		}
		if err := rn.stop(t); err != nil {
			t.Fatalf("graceful stop: Run = %v", err)
		}

		got, _ := dest.rec.Received(ctx, 0)
		want := byID(msgs)
		arrived := checkIntact(t, want, got)
		for _, m := range msgs {
			if n := arrived[m.ID.String()]; n != 1 {
				t.Errorf("message %s (stream %q, Seq %d) arrived %d times, want 1", m.ID, m.Stream, m.Seq, n)
			}
			if n := sends.count("", m.ID); n != 1 {
				t.Errorf("message %s was sent %d times, want 1", m.ID, n)
			}
		}
		if len(got) != len(msgs) {
			t.Errorf("%d deliveries arrived, want %d", len(got), len(msgs))
		}
		for _, m := range rolledBack {
			if sends.count("", m.ID) != 0 {
				t.Errorf("message %s of a rolled-back transaction was sent", m.ID)
			}
		}
		checkStreamOrder(t, want, got)
		if dest.stored != nil {
			if n, err := dest.stored(ctx); err != nil || n != uint64(len(msgs)) {
				t.Errorf("the destination holds %d messages (err %v), want %d", n, err, len(msgs))
			}
		}
		checkDrained(t, ctx, db)
		if s := rn.r.Stats(); s.Delivered != int64(len(msgs)) || s.Failed != 0 || s.DeadLettered != 0 || s.InFlight != 0 {
			t.Errorf("relay stats = %+v, want %d delivered and nothing failed, dead-lettered or in flight", s, len(msgs))
		}
	})
}
