package relay

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
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

// TestTimeoutOfASmallCallKeepsTheCap: a call no larger than one that just
// succeeded timed out: the database was slow for a moment, whatever the
// size, and the cap stays. Before, on a loaded machine with a 40 ms
// statement_timeout, a claim of 3 rows timing out between claims of 54
// halved the cap to one row, and each later blip kept it there.
func TestTimeoutOfASmallCallKeepsTheCap(t *testing.T) {
	now := epoch
	c := callSize{what: "claim", max: 4096, limit: 54, since: now, warned: new(atomic.Bool), log: slog.New(slog.DiscardHandler)}
	c.succeeded(now, 54)
	err := fmt.Errorf("claim: %w", store.ErrTimedOut)
	if c.timedOut(now.Add(time.Second), 3, err) || c.limit != 54 {
		t.Fatalf("a call of 3 timed out after one of 54 succeeded: cap %d, want 54 kept", c.limit)
	}
	if !c.timedOut(now.Add(time.Second), 100, err) || c.limit != 50 {
		t.Fatalf("a call of 100, larger than any that succeeded, timed out: cap %d, want 50", c.limit)
	}
	// A call at the cap that times out halves it, though one as large
	// succeeded a moment ago: at the margin, calls leave one.
	c.succeeded(now.Add(2*time.Second), 50)
	if !c.timedOut(now.Add(3*time.Second), 50, err) || c.limit != 25 {
		t.Fatalf("a call at the cap (50) timed out: cap %d, want 25", c.limit)
	}
	// Long after the last success, a small call's timeout says something
	// of its size again.
	if !c.timedOut(now.Add(time.Minute), 12, err) || c.limit != 6 {
		t.Fatalf("a call of 12 timed out a minute after the last success: cap %d, want 6", c.limit)
	}
}
