package sqlite

import (
	"context"
	"strings"
	"testing"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/store"
)

// TestMigrationKeepsOldBadRows: rows written before migration 0003's
// checks, which break them, do not make the migration fail; the first
// batch quarantines each and claims the good ones.
func TestMigrationKeepsOldBadRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := schemaAt(t, 2,
		`INSERT INTO backstop_outbox (destination, type, status) VALUES ('d', 't', 'abc')`,
		`INSERT INTO backstop_outbox (destination, type) VALUES ('d', 'good')`,
		`INSERT INTO backstop_outbox (destination, type, attempts) VALUES ('d', 't', 'x')`,
		`INSERT INTO backstop_outbox (destination, stream, type, scheduled_for) VALUES ('d', 's', 't', 'tomorrow')`,
		`INSERT INTO backstop_outbox (destination, stream, type) VALUES ('d', 's', 'good')`,
		`INSERT INTO backstop_outbox (destination, type, headers) VALUES ('d', 't', '"x"')`,
	)
	s := openAt(t, path, store.Config{})
	r, err := s.ProcessBatch(ctx, &store.Batch{Instance: store.Instance{ID: "i"}, Claim: store.ClaimRequest{Limit: 10}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Quarantined) != 4 {
		t.Fatalf("quarantined %d rows, want 4", len(r.Quarantined))
	}
	// the text scheduled_for held stream s (strict): once quarantined, its
	// dead letter holds it instead, in plain sight, until released
	if len(r.Claimed) != 1 || r.Claimed[0].Type != "good" || r.Claimed[0].Stream != "" {
		t.Fatalf("claimed %+v, want the good message without a stream", r.Claimed)
	}
	st, err := s.StreamStatus(ctx, "d", "s")
	if err != nil || !st.Blocked || st.Why == "" {
		t.Fatalf("StreamStatus = %+v, %v; want blocked by the dead letter", st, err)
	}
	if n, err := s.ReleaseStream(ctx, "d", "s"); err != nil || n != 1 {
		t.Fatalf("ReleaseStream = %d, %v", n, err)
	}
	r, err = s.ProcessBatch(ctx, &store.Batch{Instance: store.Instance{ID: "i"}, Claim: store.ClaimRequest{Limit: 10}})
	if err != nil || len(r.Claimed) != 1 || r.Claimed[0].Stream != "s" {
		t.Fatalf("after release: %+v, %v", r, err)
	}
	reason := errorhandling.ReasonSerializationError
	list, err := s.DLQ().List(ctx, nil)
	if err != nil || len(list) != 4 {
		t.Fatalf("dead letters: %d, %v", len(list), err)
	}
	for _, e := range list {
		if e.Reason != reason || !strings.Contains(e.ErrorMessage, "column ") {
			t.Fatalf("entry %+v", e)
		}
	}
}
