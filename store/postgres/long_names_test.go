package postgres

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// randomName is SQL for a text of n bytes that does not compress (hex of
// md5s), so that it takes its whole length in an index entry.
func randomName(n int) string {
	return `substr((SELECT string_agg(md5(random()::text), '') FROM generate_series(1, 70)), 1, ` + strconv.Itoa(n) + `)`
}

// TestLongNamesAreRefusedAtTheInsert: the dead-letter queue's index on
// (destination, stream, failure_time, id) is wider than the outbox's on
// (destination, stream, seq). A row written with plain SQL whose names
// nearly filled an index entry was taken by the outbox and could then
// never be dead-lettered (SQLSTATE 54000 on every try), holding its
// stream for good. The outbox now refuses names over outbox.MaxLimits
// (migration 0027), and a row at those limits can be dead-lettered.
func TestLongNamesAreRefusedAtTheInsert(t *testing.T) {
	admin(t)
	s, err := openTest(t, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range []struct{ dest, stream int }{{1300, 1380}, {1025, 1}, {1, 1025}} {
		err := execPoison(t, s, `INSERT INTO {prefix}outbox (destination, stream, type, ordering)
			SELECT `+randomName(c.dest)+`, `+randomName(c.stream)+`, 't', 'strict'`)
		var pe *pgconn.PgError
		if err == nil || !errors.As(err, &pe) || pe.ConstraintName != s.n.prefix+"outbox_names_fit" {
			t.Fatalf("names of %d and %d bytes: %v, want refused by outbox_names_fit", c.dest, c.stream, err)
		}
	}
	max := outbox.MaxLimits
	if err := execPoison(t, s, `INSERT INTO {prefix}outbox (destination, stream, type, ordering)
		SELECT `+randomName(max.MaxDestinationLen)+`, `+randomName(max.MaxStreamLen)+`, 't', 'strict'`); err != nil {
		t.Fatalf("names at outbox.MaxLimits refused: %v", err)
	}
	in := store.Instance{ID: "i", StartedAt: time.Now()}
	res, err := s.ProcessBatch(ctx, &store.Batch{Instance: in, Claim: store.ClaimRequest{Limit: 10}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Claimed) != 1 {
		t.Fatalf("claimed %d (quarantined %d), want 1", len(res.Claimed), len(res.Quarantined))
	}
	m := res.Claimed[0]
	res, err = s.ProcessBatch(ctx, &store.Batch{Instance: in, Failures: []store.Failure{{
		ID: m.ID, Error: "no", Reason: errorhandling.ReasonValidationFailure, Permanent: true}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rejected) != 0 || len(res.DeadLettered) != 1 {
		t.Fatalf("dead-lettering a message with names at the limits: rejected %v, dead-lettered %d", res.Rejected, len(res.DeadLettered))
	}
}

// TestLongNamesRowDoesNotStopOtherQuarantines: in a database that held
// rows before the outbox's checks (dropped here), an undecodable row whose
// names are too long for the dead-letter queue's index beside an ordinary
// undecodable row of another destination. The quarantine dead-lettered a
// batch's rows in one statement, so the entry the first cannot have kept
// the second out of the dead-letter queue in every batch; each row now
// goes in a statement of its own once the database refuses the batch's.
func TestLongNamesRowDoesNotStopOtherQuarantines(t *testing.T) {
	admin(t)
	s, err := openTest(t, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	poison.DropChecks(t, s)
	if err := execPoison(t, s, `ALTER TABLE {prefix}outbox DROP CONSTRAINT `+s.n.prefix+`outbox_names_fit`); err != nil {
		t.Fatal(err)
	}
	if err := execPoison(t, s, `INSERT INTO {prefix}outbox (destination, stream, type, headers)
		SELECT `+randomName(1300)+`, `+randomName(1380)+`, 't', '[1]'`); err != nil {
		t.Fatalf("plain SQL insert refused: %v", err)
	}
	if err := execPoison(t, s, `INSERT INTO {prefix}outbox (destination, stream, type, headers) VALUES ('other', 's', 't', '"x"')`); err != nil {
		t.Fatal(err)
	}
	in := store.Instance{ID: "i", StartedAt: time.Now()}
	var quarantined int
	for range 3 {
		res, err := s.ProcessBatch(ctx, &store.Batch{Instance: in, Claim: store.ClaimRequest{Limit: 10, Destinations: []string{"other"}}})
		if err != nil {
			t.Fatal(err)
		}
		quarantined += len(res.Quarantined)
	}
	if quarantined != 1 {
		t.Fatalf("quarantined %d rows, want the ordinary one (the long-named row cannot have an entry)", quarantined)
	}
	if n, err := s.DLQ().Count(ctx); err != nil || n != 1 {
		t.Fatalf("dead letters: %d, %v; want 1", n, err)
	}
}
