package sqlite_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
)

// An application writes a message in the same transaction as its business
// data; a relay claims it, fails once, and the failure is recorded and
// scheduled.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "backstop-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	s, err := sqlite.Open(ctx, filepath.Join(dir, "outbox.db"), store.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	// The application's transaction: business rows and the message commit
	// together.
	tx, err := s.DB().BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY)`); err != nil {
		log.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES (42)`); err != nil {
		log.Fatal(err)
	}
	if err := s.EnqueueTx(ctx, tx, &outbox.Message{
		Destination: "billing", Stream: "order-42", Type: "order.created", Payload: []byte(`{"order":42}`),
	}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}

	// A relay instance claims the next batch.
	relay := store.Instance{ID: "relay-1"}
	res, err := s.ProcessBatch(ctx, &store.Batch{Instance: relay, Claim: store.ClaimRequest{Limit: 10}})
	if err != nil {
		log.Fatal(err)
	}
	m := res.Claimed[0]
	fmt.Println("claimed:", m.Destination, m.Stream, m.Type, string(m.Payload))

	// Delivery failed; the next call records it.
	if _, err := s.ProcessBatch(ctx, &store.Batch{Instance: relay, Failures: []store.Failure{{
		ID: m.ID, Error: "connection refused", Reason: errorhandling.ReasonTransportUnavailable,
	}}}); err != nil {
		log.Fatal(err)
	}
	got, err := s.Get(ctx, m.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("status:", got.Status, "attempts:", got.Attempts, "reason:", got.FailureReason)
	fmt.Println("scheduled:", !got.ScheduledFor.IsZero())
	// Output:
	// claimed: billing order-42 order.created {"order":42}
	// status: Stored|Failed attempts: 1 reason: TransportUnavailable
	// scheduled: true
}
