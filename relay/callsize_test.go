package relay

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
)

// batchesSeen is a store that notes the renewals of each call.
type batchesSeen struct {
	*sqlite.Store
	renewals [][]uuid.UUID
}

func (s *batchesSeen) ProcessBatch(ctx context.Context, b *store.Batch) (*store.Result, error) {
	s.renewals = append(s.renewals, slices.Clone(b.RenewLeases))
	return s.Store.ProcessBatch(ctx, b)
}

// TestCappedCallRenewsTheSoonestLeasesFirst: after a timeout capped the
// claim call at two rows, the relay holding four leases renews, in one
// call, the two that lapse first, and the other two in the next round, at
// once (the renewal is still due), not a renewal period later.
func TestCappedCallRenewsTheSoonestLeasesFirst(t *testing.T) {
	e := newEnv(t)
	s := &batchesSeen{Store: e.s}
	cfg := e.config(map[string]Destination{"d": {Transport: (&recorder{}).transport()}})
	cfg.NoFleet = true
	r, err := New(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	l := newLoop(r)
	l.size.limit, l.size.since = 2, e.clk.Now()
	now := e.clk.Now()
	ids := make([]uuid.UUID, 4)
	r.fl.mu.Lock()
	for i := range ids {
		m := msg("d", "", i)
		m.ID = uuid.New()
		ids[i] = m.ID
		// the first lapses last
		r.fl.add(&flight{m: m, dest: r.dests["d"], until: now.Add(time.Duration(40-i) * time.Second)})
	}
	r.fl.mu.Unlock()
	e.clk.Advance(l.renewEvery)
	for range 2 {
		if _, err := l.step(e.ctx, true); err != nil {
			t.Fatal(err)
		}
	}
	if len(s.renewals) < 2 {
		t.Fatalf("%d calls, want 2", len(s.renewals))
	}
	first, second := s.renewals[0], s.renewals[1]
	slices.SortFunc(first, func(a, b uuid.UUID) int { return slices.Index(ids, a) - slices.Index(ids, b) })
	slices.SortFunc(second, func(a, b uuid.UUID) int { return slices.Index(ids, a) - slices.Index(ids, b) })
	if !slices.Equal(first, ids[2:]) || !slices.Equal(second, ids[:2]) {
		t.Fatalf("renewed %v then %v; want the two lapsing first (%v), then the others (%v)", first, second, ids[2:], ids[:2])
	}
}
