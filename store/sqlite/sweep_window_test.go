package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/backstophq/backstop/store"
)

// TestSweepQuarantinesRowsTheDecoderReads: rows whose first_failed_at is
// not a time the store keeps (written before migration 0003's checks, or
// with them dropped) match the undecodable index but decode, since the
// decoder does not read that time. The sweep logged them and left them,
// first in every sweep: once sweepLimit of them were there, no bad row
// written later was ever quarantined. They are quarantined now.
func TestSweepQuarantinesRowsTheDecoderReads(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "b.db")
	s, err := Open(ctx, path, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`DROP TRIGGER backstop_outbox_check_first_failed_at_insert`); err != nil {
		t.Fatal(err)
	}
	const n = sweepLimit + 5
	for range n {
		if _, err := db.Exec(`INSERT INTO backstop_outbox (id, destination, type, first_failed_at)
			VALUES (lower(hex(randomblob(4))) || '-0000-4000-8000-' || lower(hex(randomblob(6))), 'old', 't', 'yesterday')`); err != nil {
			t.Fatal(err)
		}
	}
	quarantined := 0
	for range 3 {
		res, err := s.ProcessBatch(ctx, &store.Batch{Instance: store.Instance{ID: "i"},
			Claim: store.ClaimRequest{Limit: 10, Destinations: []string{"new"}}})
		if err != nil {
			t.Fatal(err)
		}
		quarantined += len(res.Quarantined)
	}
	if quarantined != n {
		t.Fatalf("%d of %d rows quarantined", quarantined, n)
	}
}
