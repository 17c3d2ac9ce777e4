package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// BenchmarkPoisonGuards measures what the poison guards add to a batch, as
// a share of the batch in the same run: each batch completes 100 claimed
// messages (delivered) and claims 100 more from a 10k backlog; the guards
// it sends along are the sweep for undecodable rows and the resolution of
// dead letters of delivered messages. They are timed apart, sent alone in
// one round trip, and reported as guards_pct of the batch's time.
func BenchmarkPoisonGuards(b *testing.B) {
	ctx := context.Background()
	s, err := openTest(b, store.Config{})
	if err != nil {
		b.Fatal(err)
	}
	const batch = 100
	backlog{Pending: 10000}.load(b, s)
	in := store.Instance{ID: "bench"}
	res, err := s.ProcessBatch(ctx, &store.Batch{Instance: in, Claim: store.ClaimRequest{Limit: batch}})
	if err != nil {
		b.Fatal(err)
	}
	var batchTime, guardTime time.Duration
	for b.Loop() {
		done := make([]store.Completion, len(res.Claimed))
		ids := make([]string, len(res.Claimed))
		for i, m := range res.Claimed {
			done[i] = store.Completion{ID: m.ID, Status: outbox.StatusPublished}
			ids[i] = m.ID.String()
		}
		start := time.Now()
		res, err = s.ProcessBatch(ctx, &store.Batch{Instance: in, Completions: done, Claim: store.ClaimRequest{Limit: batch}})
		batchTime += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		var bad []badMessage
		p := &pipeline{}
		p.query(sweepReader(&bad), s.life.sweep, nil, in.ID, sweepLimit)
		p.exec(s.life.resolveDelivered, nil, ids, dlq.ActorBackstop, "bench")
		if err := p.run(s.pool.SendBatch(ctx, &p.b)); err != nil {
			b.Fatal(err)
		}
		guardTime += time.Since(start)
		if len(res.Claimed) < batch {
			backlog{Pending: 10000}.loadFrom(b, s, 0)
		}
	}
	// the guards' round trip is not part of what they add to a batch
	var rt time.Duration
	for range 20 {
		start := time.Now()
		if _, err := s.pool.Exec(ctx, "SELECT 1", pgx.QueryExecModeSimpleProtocol); err != nil {
			b.Fatal(err)
		}
		rt += time.Since(start)
	}
	rt /= 20
	b.ReportMetric(100*float64(guardTime-time.Duration(b.N)*rt)/float64(batchTime), "guards_pct")
	b.ReportMetric(float64(batchTime.Microseconds())/float64(b.N), "batch_us")
}
