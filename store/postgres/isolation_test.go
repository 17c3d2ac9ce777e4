package postgres

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// An application transaction at REPEATABLE READ that writes to a stream a
// relay claimed from after the transaction's snapshot gets PostgreSQL's
// serialization failure, which it can recognise (SQLSTATE 40001) and
// retry, as README says; the retry writes the message.
func TestRepeatableReadWriterOfABusyStreamCanRetry(t *testing.T) {
	s, err := openTest(t, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Enqueue(ctx, &outbox.Message{Destination: "d", Stream: "s", Type: "t"}); err != nil {
		t.Fatal(err)
	}
	write := func(claimFirst bool) error {
		return pgx.BeginTxFunc(ctx, s.Pool(), pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT 1`); err != nil { // the snapshot
				return err
			}
			if claimFirst {
				r, err := s.ProcessBatch(ctx, &store.Batch{Instance: store.Instance{ID: "relay"}, Claim: store.ClaimRequest{Limit: 10}})
				if err != nil || len(r.Claimed) != 1 {
					t.Fatalf("claim: %v (%d claimed)", err, len(r.Claimed))
				}
			}
			return s.EnqueueTx(ctx, tx, &outbox.Message{Destination: "d", Stream: "s", Type: "t"})
		})
	}
	err = write(true)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "40001" {
		t.Fatalf("write after a claim of its stream: %v, want a serialization failure (40001)", err)
	}
	if err := write(false); err != nil {
		t.Fatalf("the retry: %v", err)
	}
}
