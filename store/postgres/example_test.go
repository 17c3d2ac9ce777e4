package postgres_test

import (
	"context"
	"log"

	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/postgres"
)

// An application writes its business row and the message that announces it
// in one transaction: the message exists if and only if the order does.
// (Not run: it needs a PostgreSQL server.)
func ExampleStore_EnqueueTx() {
	ctx := context.Background()
	s, err := postgres.Open(ctx, "postgres://app@localhost:5432/shop", store.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	err = pgx.BeginFunc(ctx, s.Pool(), func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id, total) VALUES ($1, $2)`, 42, 1999); err != nil {
			return err
		}
		return s.EnqueueTx(ctx, tx, &outbox.Message{
			Destination: "billing",
			Stream:      "order-42", // delivered in order with the order's other messages
			Type:        "order.created",
			Payload:     []byte(`{"id":42,"total":1999}`),
		})
	})
	if err != nil {
		log.Fatal(err)
	}
}

// A relay claims what is due, delivers it, and reports back in the next
// call, which also claims the next batch: one round trip per batch.
func ExampleStore_ProcessBatch() {
	ctx := context.Background()
	s, err := postgres.Open(ctx, "postgres://relay@localhost:5432/shop", store.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	b := &store.Batch{Instance: store.Instance{ID: "relay-1"}, Claim: store.ClaimRequest{Limit: 100}}
	for range 3 {
		r, err := s.ProcessBatch(ctx, b)
		if err != nil {
			log.Fatal(err)
		}
		b.Completions = b.Completions[:0]
		for _, m := range r.Claimed {
			// deliver m, then:
			b.Completions = append(b.Completions, store.Completion{ID: m.ID, Status: outbox.StatusPublished})
		}
	}
}
