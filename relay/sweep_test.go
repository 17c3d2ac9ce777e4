package relay

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
)

// expiring is a store holding backlogs of idempotency keys past their
// window and of delivered messages past the retention, which its sweeps
// delete; each sweep call moves the fake clock by step (a slow database).
type expiring struct {
	*sqlite.Store
	e    *env
	step time.Duration

	mu                     sync.Mutex
	keys, published, turns int
	calls                  int
}

func (x *expiring) take(backlog *int, limit int) int {
	x.mu.Lock()
	n := min(*backlog, limit)
	*backlog -= n
	x.calls++
	x.mu.Unlock()
	if x.step > 0 {
		x.e.clk.Advance(x.step)
	}
	return n
}

func (x *expiring) SweepIdempotencyKeys(_ context.Context, limit int) (int, error) {
	return x.take(&x.keys, limit), nil
}

func (x *expiring) SweepBatch(_ context.Context, limit int) (int, error) {
	return x.take(&x.published, limit), nil
}

func (x *expiring) SweepStreamTurns(_ context.Context, limit int) (int, error) {
	return x.take(&x.turns, limit), nil
}

func (x *expiring) turnsLeft() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.turns
}

func (x *expiring) left() (keys, published, calls int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.keys, x.published, x.calls
}

// TestSweepKeepsUpWithExpiringRows: the leader's beat sweeps its
// backlogs of expired idempotency keys and delivered messages while its
// batches come back full, not a fixed number of batches. It swept one
// batch of keys a beat (1,000 every 15 s by default: 67 keys a second)
// and ten of messages (667 a second): a server taking idempotent writes
// at 300 a second gained 233 keys a second, 840,000 an hour, for good,
// and a relay delivering faster than 667 a second with a retention grew
// its outbox the same way.
func TestSweepKeepsUpWithExpiringRows(t *testing.T) {
	e := newEnv(t, func(c *store.Config) { c.Retention = time.Hour })
	x := &expiring{Store: e.s, e: e, keys: 25*sweepBatch + 1, published: 25*sweepBatch + 1, turns: 5*sweepBatch + 1}
	r, err := New(x, e.config(map[string]Destination{"d": {Transport: (&recorder{}).transport()}}))
	if err != nil {
		t.Fatal(err)
	}
	e.run(r)
	if err := r.maint.parked.wait(e.ctx, 0); err != nil { // Run's beat is over
		t.Fatal(err)
	}
	if keys, published, _ := x.left(); keys != 0 || published != 0 {
		t.Errorf("after one beat %d expired keys and %d expired messages are left, want 0 (the backlogs were %d)", keys, published, 25*sweepBatch+1)
	}
	if turns := x.turnsLeft(); turns != 0 {
		t.Errorf("after one beat %d turn rows are left unvisited, want 0 (the table held %d)", turns, 5*sweepBatch+1)
	}
	if got := r.Stats().Swept; got != 25*sweepBatch+1 {
		t.Errorf("Stats().Swept = %d, want %d", got, 25*sweepBatch+1)
	}
}

// TestSweepStopsWithinItsShareOfTheBeat: past their first sweepBatches
// batches, the beat's sweeps go on only until the beat has taken
// 1/sweepShare of HeartbeatInterval, shared by all, so that a database
// slow to delete does not hold the heart-beats past the leader's lease.
func TestSweepStopsWithinItsShareOfTheBeat(t *testing.T) {
	e := newEnv(t, func(c *store.Config) { c.Retention = time.Hour })
	x := &expiring{Store: e.s, e: e, keys: 1000 * sweepBatch, published: 1000 * sweepBatch, turns: 1000 * sweepBatch}
	r, err := New(x, e.config(map[string]Destination{"d": {Transport: (&recorder{}).transport()}}))
	if err != nil {
		t.Fatal(err)
	}
	x.step = r.heartbeatEvery() / (20 * sweepShare) // 20 batches in the beat's share
	e.run(r)
	if err := r.maint.parked.wait(e.ctx, 0); err != nil { // Run's beat is over
		t.Fatal(err)
	}
	// The keys' sweep took the share; the turn rows' sweep made its
	// sweepBatches windows (never more), the messages' its first
	// sweepBatches calls.
	if keys, published, calls := x.left(); calls != 20+2*sweepBatches || keys != 1000*sweepBatch-20*sweepBatch || published != 1000*sweepBatch-sweepBatches*sweepBatch {
		t.Errorf("the beat made %d sweep calls, leaving %d keys and %d messages; want %d calls, leaving %d and %d",
			calls, keys, published, 20+2*sweepBatches, 1000*sweepBatch-20*sweepBatch, 1000*sweepBatch-sweepBatches*sweepBatch)
	}
	if turns := x.turnsLeft(); turns != 1000*sweepBatch-sweepBatches*sweepBatch {
		t.Errorf("the beat left %d turn rows, want %d", turns, 1000*sweepBatch-sweepBatches*sweepBatch)
	}
}

// TestRelayAloneSweepsTurnRows: a relay without a fleet (NoFleet) leads
// no one, and nothing else sweeps the turn rows of emptied streams: it
// sweeps them itself every monitorEvery. They stayed for good.
func TestRelayAloneSweepsTurnRows(t *testing.T) {
	e := newEnv(t)
	x := &expiring{Store: e.s, e: e, turns: 25*sweepBatch + 1}
	cfg := e.config(map[string]Destination{"d": {Transport: (&recorder{}).transport()}})
	cfg.NoFleet = true
	r, err := New(x, cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.run(r)
	if err := r.maint.parked.wait(e.ctx, 0); err != nil { // its first turn is over
		t.Fatal(err)
	}
	if turns := x.turnsLeft(); turns != 15*sweepBatch+1 {
		t.Fatalf("after the first turn %d turn rows are left unvisited, want %d (sweepBatches windows)", turns, 15*sweepBatch+1)
	}
	for i := range 2 {
		e.clk.Advance(monitorEvery)
		if err := r.maint.parked.wait(e.ctx, uint64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	if turns := x.turnsLeft(); turns != 0 {
		t.Errorf("after three turns %d turn rows are left unvisited, want 0", turns)
	}
}

// TestRelayAloneSweepsExpiredRows: a relay without a fleet (NoFleet)
// sweeps the idempotency keys past their window and the delivered
// messages kept past the Retention every monitorEvery, as a leader does;
// nothing else would, and both tables grew for good. NoSweep leaves them
// to the application's own sweep.
func TestRelayAloneSweepsExpiredRows(t *testing.T) {
	for _, noSweep := range []bool{false, true} {
		t.Run(map[bool]string{false: "sweeps", true: "NoSweep"}[noSweep], func(t *testing.T) {
			e := newEnv(t, func(c *store.Config) { c.Retention = time.Hour })
			const backlog = 25*sweepBatch + 1
			x := &expiring{Store: e.s, e: e, keys: backlog, published: backlog}
			cfg := e.config(map[string]Destination{"d": {Transport: (&recorder{}).transport()}})
			cfg.NoFleet, cfg.NoSweep = true, noSweep
			r, err := New(x, cfg)
			if err != nil {
				t.Fatal(err)
			}
			e.run(r)
			if err := r.maint.parked.wait(e.ctx, 0); err != nil { // its first turn is over
				t.Fatal(err)
			}
			want := 0
			if noSweep {
				want = backlog
			}
			if keys, published, _ := x.left(); keys != want || published != want {
				t.Errorf("after the first turn %d expired keys and %d expired messages are left, want %d of each", keys, published, want)
			}
			if got := r.Stats().Swept; got != int64(backlog-want) {
				t.Errorf("Stats().Swept = %d, want %d", got, backlog-want)
			}
		})
	}
}
