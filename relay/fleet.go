package relay

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/backstophq/backstop/store"
)

// When the store implements store.Fleet, the relays sharing it act as one
// toward each destination. A relay whose breaker opens a destination's
// circuit opens it in the store too; every relay reads the shared circuits
// at least every PollInterval and opens (or closes) its own to match, so
// all stop claiming for a destination one of them found down. Probes are
// taken from the store's probe token (store.Fleet.TakeProbe): the fleet
// sends one per probe interval, whichever relay sends it, and the probe
// that succeeds closes the circuit for all. A Retry-After pause is written
// to the store and holds every relay.
//
// The store calls are made by the claimer, between claims: the gates only
// queue them (fleetOps).

// fleetOps are the store calls the gates queued for the claimer. Each
// says where a destination's shared circuit or pause should stand, so a
// later call of the same kind for the same destination replaces an
// earlier one (of two pauses, the longer stays): while the store is out of
// reach the calls are put back, and a destination that kept failing and
// recovering queued one for each change, without bound, to be made one
// after another once the store answered.
type fleetOps struct {
	mu  sync.Mutex
	ops []fleetOp
}

// fleetOp is a queued store call.
type fleetOp struct {
	key   string        // the destination and the kind of call: a later op of the key replaces it
	pause time.Duration // a pause's length: of two, the longer stays
	call  func(ctx context.Context, f store.Fleet) error
}

func (q *fleetOps) add(op fleetOp) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if i := q.find(op.key); i >= 0 {
		if q.ops[i].pause > op.pause {
			return
		}
		q.ops = append(q.ops[:i], q.ops[i+1:]...)
	}
	q.ops = append(q.ops, op)
}

// find returns the index of the queued op of key, or -1. q.mu is held.
func (q *fleetOps) find(key string) int {
	for i, o := range q.ops {
		if o.key == key {
			return i
		}
	}
	return -1
}

func (q *fleetOps) take() []fleetOp {
	q.mu.Lock()
	defer q.mu.Unlock()
	ops := q.ops
	q.ops = nil
	return ops
}

// putBack puts ops, which could not be made, back ahead of those queued
// since, except where one queued since replaces them.
func (q *fleetOps) putBack(ops []fleetOp) {
	q.mu.Lock()
	defer q.mu.Unlock()
	back := make([]fleetOp, 0, len(ops)+len(q.ops))
	for _, o := range ops {
		if i := q.find(o.key); i >= 0 {
			if q.ops[i].pause < o.pause {
				q.ops[i] = o
			}
			continue
		}
		back = append(back, o)
	}
	q.ops = append(back, q.ops...)
}

// len is how many calls are queued.
func (q *fleetOps) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.ops)
}

// fleetOpened queues the opening of d's shared circuit.
func (r *Relay) fleetOpened(d *destination) {
	if r.fleet == nil {
		return
	}
	r.fleetQ.add(fleetOp{key: "circuit\x00" + d.name, call: func(ctx context.Context, f store.Fleet) error {
		_, err := f.OpenCircuit(ctx, d.name, r.cfg.Instance.ID, d.firstProbe)
		return err
	}})
}

// fleetClosed queues the closing of d's shared circuit.
func (r *Relay) fleetClosed(d *destination) {
	if r.fleet == nil {
		return
	}
	r.fleetQ.add(fleetOp{key: "circuit\x00" + d.name, call: func(ctx context.Context, f store.Fleet) error {
		return f.CloseCircuit(ctx, d.name, r.cfg.Instance.ID)
	}})
}

// fleetPaused queues a pause of d for the fleet.
func (r *Relay) fleetPaused(d *destination, after time.Duration) {
	if r.fleet == nil {
		return
	}
	r.fleetQ.add(fleetOp{key: "pause\x00" + d.name, pause: after, call: func(ctx context.Context, f store.Fleet) error {
		return f.PauseDestination(ctx, d.name, after)
	}})
}

// syncFleet makes the queued store calls and, at most once per
// PollInterval (or when force is set), matches the gates to the shared
// circuits.
func (l *loop) syncFleet(ctx context.Context, now time.Time, force bool) {
	r := l.r
	if r.fleet == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, storeCallTimeout)
	defer cancel()
	// A gate that opens or closes from here on queues its store call after
	// the calls taken below: the reading does not hold it.
	changes := make([]uint64, len(r.destList))
	for i, d := range r.destList {
		changes[i] = d.changes()
	}
	ops := r.fleetQ.take()
	for i, op := range ops {
		if err := op.call(ctx, r.fleet); err != nil {
			r.log.LogAttrs(ctx, slog.LevelWarn, "shared circuit update failed", slog.String("error", err.Error()))
			if r.outOfReach(err) {
				// Made again at the next sync, before the circuits are
				// read: read without them, the circuits undid what the
				// gates did (a circuit the relay opened read closed, and
				// closed "by another instance").
				r.fleetQ.putBack(ops[i:])
				return
			}
		}
	}
	// A last reading ahead of now was made before the clock was stepped
	// back: waiting for the clock to pass it again left the gates
	// unmatched to the fleet for as long as the step.
	if since := now.Sub(l.lastSync); !force && since >= 0 && since < r.cfg.PollInterval {
		return
	}
	cs, err := r.fleet.Circuits(ctx)
	l.lastSync = now // a failed reading is not tried again, nor logged, more than once a poll interval
	if err != nil {
		r.log.LogAttrs(ctx, slog.LevelWarn, "reading the shared circuits failed", slog.String("error", err.Error()))
		return
	}
	shared := make(map[string]store.Circuit, len(cs))
	for _, c := range cs {
		shared[c.Destination] = c
	}
	for i, d := range r.destList {
		c := shared[d.name]
		// Held until the next reading at least.
		d.fleetPaused(now, c.Paused, r.cfg.PollInterval)
		// A gate that changed during the reading is left as it is, its
		// call queued: matched to the reading, a circuit a worker had
		// just opened was closed "by another instance" and its breaker
		// reset, to be opened by the next reading with the breaker left
		// closed.
		switch {
		case !d.match(c.Open, now, changes[i]):
		case c.Open:
			r.log.LogAttrs(ctx, slog.LevelWarn, "destination's circuit opened by another instance",
				slog.String("destination", d.name), slog.String("opened_by", c.OpenedBy))
		default:
			r.gateClosed(d, "destination's circuit closed by another instance")
		}
		if c.Open && c.ProbeDue {
			d.probeDueNow(now)
		}
	}
}

// takeProbe asks the store for d's probe token; without a shared store
// the gate alone decides.
func (l *loop) takeProbe(ctx context.Context, d *destination, now time.Time) bool {
	r := l.r
	if r.fleet == nil {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, storeCallTimeout)
	defer cancel()
	ok, err := r.fleet.TakeProbe(ctx, d.name, r.cfg.Instance.ID, d.maxProbe)
	if err != nil {
		r.log.LogAttrs(ctx, slog.LevelWarn, "taking a probe token failed", slog.String("destination", d.name),
			slog.String("error", err.Error()))
	}
	if !ok {
		// Another instance probes, or none is due: look again later.
		d.probeLater(now, min(d.firstProbe, r.cfg.PollInterval))
	}
	return ok
}

// outOfReach says whether err is a store call that never reached the
// database, to be made again; an error the store decided is not.
func (r *Relay) outOfReach(err error) bool {
	if errors.Is(err, store.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	rc, ok := r.store.(store.Reachability)
	return ok && rc.Unreachable(err)
}
