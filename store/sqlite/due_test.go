package sqlite

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/backstophq/backstop/store"
)

// TestClaimFindsEveryDueDestination: a claim that names no destination
// finds an unordered retry due, or an unordered lease lapsed, of
// destination b behind 1,100 rows of destination a that it cannot take:
// published retries kept under Retention, due retries and lapsed leases
// of a destination the claim excludes. It read the first 1,000 rows due
// (lapsed) of all and then filtered them, and claimed nothing of b.
func TestClaimFindsEveryDueDestination(t *testing.T) {
	t.Parallel()
	const (
		published = "status = 32773, published_at = :past, scheduled_for = :early"
		due       = "status = 32769, scheduled_for = :early"
		lapsed    = "instance_id = 'gone', lease_expiry = :early"
	)
	for _, c := range []struct {
		name, a, b string
		exclude    []string
	}{
		{"behind published retries kept", published, "status = 32769, scheduled_for = :past", []string{"c"}},
		{"behind due retries of an excluded destination", due, "status = 32769, scheduled_for = :past", []string{"a"}},
		{"behind lapsed leases of an excluded destination", lapsed, "instance_id = 'gone', lease_expiry = :past", []string{"a"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s, _ := openTemp(t, store.Config{Retention: time.Hour})
			now := time.Now()
			early, past := sql.Named("early", now.Add(-2*time.Hour).UnixMilli()), sql.Named("past", now.Add(-time.Hour).UnixMilli())
			write := func(dest string, n int, set string) {
				q := `WITH RECURSIVE g(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM g WHERE i + 1 < :n)
INSERT INTO {{prefix}}outbox (destination, type, payload) SELECT :dest, 't', '{}' FROM g`
				if _, err := s.w.Exec(s.sql(q), sql.Named("n", n), sql.Named("dest", dest)); err != nil {
					t.Fatal(err)
				}
				if _, err := s.w.Exec(s.sql(`UPDATE {{prefix}}outbox SET attempts = 1, `+set+` WHERE destination = :dest`),
					sql.Named("dest", dest), early, past); err != nil {
					t.Fatal(err)
				}
			}
			write("a", 1_100, c.a)
			write("b", 1, c.b)
			r, err := s.ProcessBatch(context.Background(), &store.Batch{Instance: store.Instance{ID: "i"},
				Claim: store.ClaimRequest{Limit: 10, ExcludeDestinations: c.exclude}})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Claimed) != 1 || r.Claimed[0].Destination != "b" {
				t.Fatalf("claimed %d messages, want b's one", len(r.Claimed))
			}
		})
	}
}
