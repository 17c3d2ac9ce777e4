package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// A database that takes no writes for a while (a standby the pool reached
// after a failover, default_transaction_read_only set for a maintenance)
// fails every write with SQLSTATE 25006. That says nothing of the
// outcomes a batch carried: it matches store.ErrUnavailable, so that the
// relay keeps them and records them once writes are taken again. Before,
// the store took it for a refusal of each outcome in turn: the relay
// dropped them ("the store refused to record an outcome") and delivered
// the messages again once their leases lapsed; the admin API answered 500
// where 503 says "try again".
func TestReadOnlyDatabaseIsUnavailable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	schema := newSchema(t)
	s, err := New(schemaPool(t, schema, 2), store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	m, in := leasedMessage(t, ctx, s)

	// The same schema through sessions that take no writes.
	pcfg, err := pgxpool.ParseConfig(testURL())
	if err != nil {
		t.Fatal(err)
	}
	pcfg.ConnConfig.RuntimeParams["search_path"] = schema
	pcfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ro, err := New(pool, store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []*store.Batch{
		{Instance: in, Completions: []store.Completion{{ID: m.ID}}},
		{Instance: in, Failures: []store.Failure{{ID: m.ID, Error: "boom"}}},
		{Instance: in, Claim: store.ClaimRequest{Limit: 10}},
	} {
		res, err := ro.ProcessBatch(ctx, b)
		if !errors.Is(err, store.ErrUnavailable) || !ro.Unreachable(err) {
			t.Fatalf("ProcessBatch on a read-only database: %v (rejected %v); want it to match store.ErrUnavailable", err, res)
		}
	}
	if err := ro.Enqueue(ctx, &outbox.Message{Destination: "d", Type: "t"}); err == nil || !ro.Unreachable(err) {
		t.Fatalf("Enqueue on a read-only database: %v; want an error the store calls unreachable (the admin API's 503)", err)
	}

	// Writes are taken again: the outcome kept is recorded.
	res, err := s.ProcessBatch(ctx, &store.Batch{Instance: in, Completions: []store.Completion{{ID: m.ID}}})
	if err != nil || len(res.Stale) != 0 || len(res.Rejected) != 0 {
		t.Fatalf("recording once writes are taken: %v, stale %v, rejected %v", err, res.Stale, res.Rejected)
	}
}
