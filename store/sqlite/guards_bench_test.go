package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// BenchmarkPoisonGuards measures what the poison guards add to a batch, as
// a share of the batch in the same run: each batch completes 100 claimed
// messages (delivered) and claims 100 more from a 10k backlog; the guards
// it runs are the sweep for undecodable rows, a savepoint per outcome and
// the resolution of dead letters of delivered messages. Their cost is
// timed apart, on the same database, and reported as a share of the
// batch's time: guards_pct in all, sweep_pct and resolve_pct of it.
func BenchmarkPoisonGuards(b *testing.B) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(b.TempDir(), "bench.db"), store.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const backlog, batch = 10000, 100
	fill := func(n int) {
		msgs := make([]*outbox.Message, n)
		for i := range msgs {
			msgs[i] = &outbox.Message{Destination: "d", Stream: fmt.Sprintf("s%d", i%50), Type: "t", Payload: []byte(`{"n":1}`)}
		}
		if err := s.Enqueue(ctx, msgs...); err != nil {
			b.Fatal(err)
		}
	}
	fill(backlog)
	in := store.Instance{ID: "bench"}
	res, err := s.ProcessBatch(ctx, &store.Batch{Instance: in, Claim: store.ClaimRequest{Limit: batch}})
	if err != nil {
		b.Fatal(err)
	}
	var batchTime, guardTime, sweepTime, emptyTx, resolveTime time.Duration
	for b.Loop() {
		done := make([]store.Completion, len(res.Claimed))
		ids := make([]uuid.UUID, len(res.Claimed))
		for i, m := range res.Claimed {
			done[i] = store.Completion{ID: m.ID, Status: outbox.StatusPublished}
			ids[i] = m.ID
		}
		start := time.Now()
		res, err = s.ProcessBatch(ctx, &store.Batch{Instance: in, Completions: done, Claim: store.ClaimRequest{Limit: batch}})
		batchTime += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		if err := s.write(ctx, func(tx *sql.Tx) error { return nil }); err != nil {
			b.Fatal(err)
		}
		emptyTx += time.Since(start)
		start = time.Now()
		err = s.write(ctx, func(tx *sql.Tx) error {
			t0 := time.Now()
			if _, err := s.sweep(ctx, tx); err != nil {
				return err
			}
			sweepTime += time.Since(t0)
			now := s.now()
			strs := make([]string, len(ids))
			for i, id := range ids {
				strs[i] = id.String()
			}
			t0 = time.Now()
			if err := s.resolveDelivered(ctx, tx, strs, in.ID, now); err != nil {
				return err
			}
			resolveTime += time.Since(t0)
			for range ids {
				if _, fatal := s.savepoint(ctx, tx, func() error { return nil }); fatal != nil {
					return fatal
				}
			}
			return nil
		})
		guardTime += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Claimed) < batch {
			fill(backlog)
		}
	}
	// the guards' own transaction is not part of what they add to a batch
	b.ReportMetric(100*float64(guardTime-emptyTx)/float64(batchTime), "guards_pct")
	b.ReportMetric(100*float64(sweepTime)/float64(batchTime), "sweep_pct")
	b.ReportMetric(100*float64(resolveTime)/float64(batchTime), "resolve_pct")
	b.ReportMetric(float64(batchTime.Microseconds())/float64(b.N), "batch_us")
}
