package postgres

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// TestSweepIsNotFilledByRowsItCannotQuarantine: rows written by plain SQL
// with an infinite first_failed_at (or last_failed_at, stream_released_at,
// published_at) are outside validRow but decode, since the decoder does
// not read those times. They were swept and left, first in every sweep:
// once sweepLimit of them were there, no bad row written later was ever
// quarantined (found by FuzzClaimArbitraryRows in CI). They are
// quarantined now, and so is the row written after them.
func TestSweepIsNotFilledByRowsItCannotQuarantine(t *testing.T) {
	ctx := context.Background()
	s, err := openTest(t, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `ALTER TABLE `+s.n.outbox+` DROP CONSTRAINT `+s.n.prefix+`outbox_times_finite`); err != nil {
		t.Fatal(err)
	}
	for _, col := range []string{"first_failed_at", "last_failed_at", "stream_released_at", "published_at"} {
		if _, err := s.pool.Exec(ctx, `INSERT INTO `+s.n.outbox+` (destination, type, `+col+`)
			SELECT 'old', 't', 'infinity' FROM generate_series(1, $1)`, sweepLimit/4+1); err != nil {
			t.Fatal(err)
		}
	}
	var late uuid.UUID
	if err := s.pool.QueryRow(ctx, `INSERT INTO `+s.n.outbox+` (destination, type, scheduled_for)
		VALUES ('new', 't', 'infinity') RETURNING id`).Scan(&late); err != nil {
		t.Fatal(err)
	}
	good := &outbox.Message{Destination: "new", Type: "t"}
	if err := s.Enqueue(ctx, good); err != nil {
		t.Fatal(err)
	}
	quarantined := map[uuid.UUID]bool{}
	for range 3 {
		res, err := s.ProcessBatch(ctx, &store.Batch{Instance: store.Instance{ID: "i"},
			Claim: store.ClaimRequest{Limit: 10, Destinations: []string{"new"}}})
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range res.Quarantined {
			quarantined[id] = true
		}
	}
	if !quarantined[late] {
		t.Fatalf("the row written after %d rows with an infinite time was not quarantined (%d quarantined)", 4*(sweepLimit/4+1), len(quarantined))
	}
	var left int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM `+s.n.outbox+` WHERE destination = 'old' AND dead_lettered_at IS NULL`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d rows with an infinite time left unquarantined", left)
	}
}
