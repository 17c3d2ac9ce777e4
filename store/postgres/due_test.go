package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/backstophq/backstop/store"
)

// TestClaimFindsEveryDueDestination: a claim that excludes a destination
// still finds an unordered retry due of destination b behind 1,100 due
// retries of the excluded destination a. claim_destinations took the first
// 1,000 due unordered retries of every destination, and the claim then
// dropped the excluded ones: b's retry waited until a's were taken (never,
// while a's circuit stayed open).
func TestClaimFindsEveryDueDestination(t *testing.T) {
	s, err := openTest(t, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Now()
	write := func(dest string, n int, due time.Time) {
		t.Helper()
		if _, err := s.pool.Exec(ctx, `INSERT INTO `+s.n.outbox+` (destination, type, payload, status, attempts, scheduled_for)
			SELECT $1, 't', '{}', 32769, 1, $3 FROM generate_series(1, $2)`, dest, n, due); err != nil {
			t.Fatal(err)
		}
	}
	write("a", 1_100, now.Add(-2*time.Hour))
	write("b", 1, now.Add(-time.Hour))
	r, err := s.ProcessBatch(ctx, &store.Batch{Instance: store.Instance{ID: "i"},
		Claim: store.ClaimRequest{Limit: 10, ExcludeDestinations: []string{"a"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Claimed) != 1 || r.Claimed[0].Destination != "b" {
		t.Fatalf("claimed %d messages, want b's one", len(r.Claimed))
	}
}
