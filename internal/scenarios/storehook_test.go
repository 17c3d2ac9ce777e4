package scenarios

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/store"
)

// errKilled is what every store call of a killed relay returns.
var errKilled = errors.New("scenario: the relay's process was killed")

// hookedStore is the store as one relay sees it. It records the relay's
// store calls and what they left the relay holding, lets the test wake the
// relay (Subscribe merges the store's own wake-ups with kick), and can
// "kill" the relay's process: from then on every call fails, so nothing it
// does reaches the database: it stops heart-beating and its leases stay.
type hookedStore struct {
	store.Store
	clk     clock.Clock
	changed *pulse
	kicks   chan struct{}
	dead    atomic.Bool

	mu      sync.Mutex
	started int
	calls   []call
	held    map[uuid.UUID]struct{} // claimed, outcome not recorded yet
	waits   []bool                 // SetWaiting calls that succeeded
}

// call is one ProcessBatch a relay made.
type call struct {
	n       int       // its number, from 1, in the order calls started
	at      time.Time // the fake time it started
	end     time.Time // the fake time it returned; the store's time is between
	limit   int       // how many messages it asked for
	gave    int       // how many messages it gave back (releases)
	claimed []uuid.UUID
	dead    int // instances it declared dead
	err     error
	idle    bool // it succeeded and left the relay holding nothing
}

func newHookedStore(s store.Store, clk clock.Clock, changed *pulse) *hookedStore {
	return &hookedStore{Store: s, clk: clk, changed: changed, kicks: make(chan struct{}, 1), held: map[uuid.UUID]struct{}{}}
}

// ProcessBatch records the call around the store's.
func (h *hookedStore) ProcessBatch(ctx context.Context, b *store.Batch) (*store.Result, error) {
	h.mu.Lock()
	h.started++
	c := call{n: h.started, at: h.clk.Now(), limit: b.Claim.Limit, gave: len(b.Releases)}
	h.mu.Unlock()
	var res *store.Result
	var err error
	if h.dead.Load() {
		err = errKilled
	} else {
		res, err = h.Store.ProcessBatch(ctx, b)
	}
	h.mu.Lock()
	c.err, c.end = err, h.clk.Now()
	if err == nil {
		for _, x := range b.Completions {
			delete(h.held, x.ID)
		}
		for _, x := range b.Failures {
			delete(h.held, x.ID)
		}
		for _, x := range b.Releases {
			delete(h.held, x.ID)
		}
		for _, m := range res.Claimed {
			h.held[m.ID] = struct{}{}
			c.claimed = append(c.claimed, m.ID)
		}
		c.dead = res.DeadInstances
		c.idle = len(h.held) == 0
	}
	h.calls = append(h.calls, c)
	h.mu.Unlock()
	h.changed.fire()
	return res, err
}

// SetWaiting implements store.WakeGate for a store that has one, so that
// the relay's registration reaches it (PostgreSQL notifies only then).
// It records each registration that succeeded (waitings).
func (h *hookedStore) SetWaiting(ctx context.Context, id string, waiting bool) error {
	if h.dead.Load() {
		return errKilled
	}
	if g, ok := h.Store.(store.WakeGate); ok {
		if err := g.SetWaiting(ctx, id, waiting); err != nil {
			return err
		}
	}
	h.mu.Lock()
	h.waits = append(h.waits, waiting)
	h.mu.Unlock()
	h.changed.fire()
	return nil
}

// waitings returns the relay's registrations as waiting (true) and their
// ends (false), in order.
func (h *hookedStore) waitings() []bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]bool(nil), h.waits...)
}

// Subscribe implements store.Notifier: the store's wake-ups, if it has
// any, and the test's kicks.
func (h *hookedStore) Subscribe(ctx context.Context) (<-chan struct{}, error) {
	var inner <-chan struct{}
	if n, ok := h.Store.(store.Notifier); ok {
		ch, err := n.Subscribe(ctx)
		if err != nil {
			return nil, err
		}
		inner = ch
	}
	out := make(chan struct{}, 1)
	go func() {
		defer close(out)
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-inner:
				if !ok {
					inner = nil
					continue
				}
			case <-h.kicks:
			}
			select {
			case out <- struct{}{}:
			default:
			}
		}
	}()
	return out, nil
}

// kick wakes the relay for a round; kicks coalesce.
func (h *hookedStore) kick() {
	select {
	case h.kicks <- struct{}{}:
	default:
	}
}

// kill makes every later store call fail.
func (h *hookedStore) kill() { h.dead.Store(true) }

func (h *hookedStore) killed() bool { return h.dead.Load() }

func (h *hookedStore) startedCalls() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.started
}

// settledAfter reports whether the relay has settled since its call
// number mark: its last two calls both left it holding nothing, and both
// belong to rounds it planned after mark was taken.
//
// A round of the relay's loop plans (which destinations to claim for,
// whether a half-open breaker gets a probe), makes its main call, then its
// probe calls, one at a time, and updates its Stats before the next
// round. With one destination a round makes at most two calls, so the
// first two calls after mark may belong to a round planned before it
// (before the test moved the clock, say) and are not counted. Two idle
// calls of later rounds mean that nothing was claimable, probes included,
// and that the Stats count everything recorded.
func (h *hookedStore) settledAfter(mark int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(h.calls)
	return n >= 2 && h.calls[n-2].n > mark+2 && h.calls[n-2].idle && h.calls[n-1].idle
}

// callsSince returns the calls numbered after mark.
func (h *hookedStore) callsSince(mark int) []call {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []call
	for _, c := range h.calls {
		if c.n > mark {
			out = append(out, c)
		}
	}
	return out
}

// holding returns the messages the relay has claimed and not yet had
// recorded.
func (h *hookedStore) holding() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.held)
}
