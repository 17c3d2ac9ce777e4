package relay

import (
	"testing"
	"time"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/store"
)

// TestDLQOldestAgeIsOnTheStoresClock: the store stamps a dead letter's
// failure time with its own clock (the database's on PostgreSQL), here an
// hour ahead of the relay's, and the entry failed two minutes ago by it.
// backstop_dlq_oldest_age_seconds must say 120: read against the relay's
// clock it said 0 (a negative age, floored) until the relay's clock had
// caught up an hour, and with the clocks the other way an hour too old.
func TestDLQOldestAgeIsOnTheStoresClock(t *testing.T) {
	t.Parallel()
	for _, ahead := range []time.Duration{time.Hour, -time.Hour} {
		t.Run(ahead.String(), func(t *testing.T) {
			t.Parallel()
			storeClk := clock.NewFake(epoch.Add(ahead))
			e := newEnv(t, func(c *store.Config) { c.Clock = storeClk })
			m := msg("elsewhere", "s", 1)
			e.enqueue(m)
			if err := e.s.DeadLetter(e.ctx, m.ID, "probe"); err != nil {
				t.Fatal(err)
			}
			storeClk.Advance(2 * time.Minute)
			_, reg := runWithoutFleet(e, e.s)
			if got := gather(t, reg)["backstop_dlq_oldest_age_seconds"]; got != 120 {
				t.Fatalf("backstop_dlq_oldest_age_seconds = %v with the store's clock %v off the relay's, want 120", got, ahead)
			}
		})
	}
}
