package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/backstophq/backstop/store"
)

// A row written before the checks of migration 0002 (or with them
// dropped) may hold an infinite failure or due time; subtracting one
// fails ("cannot subtract infinite timestamps"), and RebaseSchedules, one
// statement over every waiting row, then failed at every beat: one such
// row kept every retry scheduled before a clock step back waiting the
// step. Such rows are the quarantine's; the rebase passes over them.
func TestRebasePassesOverInfiniteTimes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := openTest(t, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `ALTER TABLE `+s.n.outbox+` DROP CONSTRAINT `+s.n.prefix+`outbox_times_finite`); err != nil {
		t.Fatal(err)
	}
	insert := func(failed, due string) string {
		t.Helper()
		var id string
		if err := s.pool.QueryRow(ctx, `INSERT INTO `+s.n.outbox+` (destination, type, attempts, last_failed_at, scheduled_for)
			VALUES ('d', 't', 1, `+failed+`, `+due+`) RETURNING id::text`).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	insert("'infinity'", "'infinity'")
	insert("now() + interval '1 hour'", "'infinity'")
	// A retry stamped an hour ahead of the clock: scheduled before a step back.
	id := insert("now() + interval '1 hour'", "now() + interval '61 minutes'")
	n, err := s.RebaseSchedules(ctx)
	if err != nil || n != 1 {
		t.Fatalf("RebaseSchedules = %d, %v; want the one retry moved, the rows with infinite times passed over", n, err)
	}
	var moved bool
	if err := s.pool.QueryRow(ctx, `SELECT scheduled_for BETWEEN now() AND now() + interval '2 minutes' FROM `+s.n.outbox+`
		WHERE id = $1::uuid`, id).Scan(&moved); err != nil || !moved {
		t.Fatalf("the retry was not moved to its minute from now: %v, %v", moved, err)
	}
}
