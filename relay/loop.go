package relay

import (
	"context"
	"log/slog"
	"math"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/tracker"
)

// storeCallTimeout bounds one store call on the wall clock, so that a hung
// connection cannot stall the relay for ever.
const storeCallTimeout = 30 * time.Second

// flight is a claimed message whose outcome the store has not recorded.
type flight struct {
	m     *outbox.Message
	dest  *destination // nil for an unconfigured destination
	probe bool         // claimed to probe a half-open breaker
	lost  bool         // a renewal found the lease gone
}

// loop is the coordinating goroutine's state. Only that goroutine touches
// it.
type loop struct {
	r           *Relay
	inflight    map[uuid.UUID]*flight
	held        []outcome // outcomes of a failed store call, to send again
	lastRenew   time.Time
	renewEvery  time.Duration
	poll        time.Duration // the idle wait, doubled up to MaxPollInterval
	errWait     time.Duration // the wait after a failed store call
	storeHealth *tracker.Tracker
	round       uint64 // the number of the current round
}

func newLoop(r *Relay) *loop {
	return &loop{
		r:          r,
		inflight:   make(map[uuid.UUID]*flight),
		lastRenew:  r.clk.Now(),
		renewEvery: max(r.cfg.LeaseDuration/3, time.Millisecond),
		poll:       r.cfg.PollInterval,
		errWait:    r.cfg.PollInterval,
		storeHealth: tracker.New(tracker.Config{
			Name: "store", Logger: r.log, Clock: r.clk,
		}),
	}
}

// run makes rounds until ctx is done. A store call in progress when ctx
// ends is finished, not interrupted, so that the relay always knows what it
// has claimed.
func (l *loop) run(ctx context.Context, notify <-chan struct{}) {
	cfg := &l.r.cfg
	storeCtx := context.WithoutCancel(ctx)
	for ctx.Err() == nil {
		rd, err := l.step(storeCtx, true)
		var wait time.Duration
		switch {
		case err != nil:
			wait = l.errWait
			l.errWait = min(2*l.errWait, cfg.MaxPollInterval)
		case rd.limit > 0 && rd.claimed == rd.limit && l.free() > 0:
			continue // a full claim: more is probably waiting
		case rd.claimed > 0:
			l.poll = cfg.PollInterval
			wait = l.poll
		default:
			wait = l.poll
			l.poll = min(2*l.poll, cfg.MaxPollInterval)
		}
		if err == nil {
			l.errWait = cfg.PollInterval
		}
		notify = l.block(ctx, notify, wait)
	}
}

// block waits for a wake-up, a notification, ctx, or wait (shortened to
// the next lease renewal or breaker half-opening). It returns notify, or
// nil once that channel is closed.
func (l *loop) block(ctx context.Context, notify <-chan struct{}, wait time.Duration) <-chan struct{} {
	r := l.r
	wait = min(wait, l.untilRenew(), l.untilHalfOpen())
	t := r.clk.NewTimer(wait)
	defer t.Stop()
	r.turned.set(l.round)
	if len(l.inflight) == 0 && !r.pendingOutcomes() {
		r.idle.set(l.round)
	}
	select {
	case <-ctx.Done():
	case <-r.wakeCh:
	case _, ok := <-notify:
		if !ok {
			return nil
		}
		l.poll = r.cfg.PollInterval
	case <-t.C():
	}
	return notify
}

// round is what one step did.
type round struct {
	limit   int // messages the main claim asked for
	claimed int // messages it got
}

// free is how many more messages the relay may hold.
func (l *loop) free() int { return l.r.cfg.BatchSize - len(l.inflight) }

// step records the reported outcomes, renews the leases due for renewal
// and, when claim is set, claims work: one call for the destinations whose
// breaker is closed and one probe call for each half-open one.
func (l *loop) step(ctx context.Context, claim bool) (round, error) {
	r := l.r
	l.round = r.rounds.Add(1)
	outs := l.take()
	now := r.clk.Now()
	b := &store.Batch{Instance: r.cfg.Instance, Claim: store.ClaimRequest{Lease: r.cfg.LeaseDuration}}
	for i := range outs {
		outs[i].addTo(b)
	}
	var renewed []uuid.UUID
	if len(l.inflight) > 0 && now.Sub(l.lastRenew) >= l.renewEvery {
		for id, f := range l.inflight {
			if !f.lost {
				renewed = append(renewed, id)
			}
		}
		b.RenewLeases = renewed
	}
	var probes []*destination
	if claim {
		var exclude []string
		exclude, probes = l.breakerPlan()
		b.Claim.Limit = max(l.free()-len(probes), 0)
		b.Claim.ExcludeDestinations = exclude
		if r.cfg.UnknownDestination == IgnoreUnknown {
			b.Claim.Destinations = l.closedDestinations(exclude)
			if len(b.Claim.Destinations) == 0 {
				b.Claim.Limit = 0
			}
		}
	}
	rd := round{limit: b.Claim.Limit}
	// While running, every round calls the store, if only to heart-beat;
	// while shutting down, only to record and renew.
	if claim || len(outs) > 0 || len(renewed) > 0 {
		res, err := l.call(ctx, b)
		if err != nil {
			l.held = outs
			return rd, err
		}
		if len(renewed) > 0 {
			l.lastRenew = now
		}
		r.recorded(outs, res)
		l.lostLeases(res.Stale, renewed)
		l.dispatch(res.Claimed, false)
		rd.claimed = len(res.Claimed)
	}
	for _, d := range probes {
		n := min(d.halfOpenMax-d.probes, l.free())
		if n <= 0 {
			continue
		}
		res, err := l.call(ctx, &store.Batch{Instance: r.cfg.Instance, Claim: store.ClaimRequest{
			Limit: n, Lease: r.cfg.LeaseDuration, Destinations: []string{d.name},
		}})
		if err != nil {
			return rd, err
		}
		l.dispatch(res.Claimed, true)
	}
	r.stats.inFlight.Store(int64(len(l.inflight)))
	return rd, nil
}

// take returns the outcomes to record: those held back by a failed call,
// then those reported since; their messages are no longer in flight.
func (l *loop) take() []outcome {
	outs := append(l.held, l.r.takeOutcomes()...)
	l.held = nil
	for _, o := range outs {
		if f, ok := l.inflight[o.m.ID]; ok {
			if f.probe && f.dest != nil {
				f.dest.probes--
			}
			delete(l.inflight, o.m.ID)
		}
	}
	return outs
}

// call makes one store call and accounts for it.
func (l *loop) call(ctx context.Context, b *store.Batch) (*store.Result, error) {
	r := l.r
	ctx, cancel := context.WithTimeout(ctx, storeCallTimeout)
	defer cancel()
	start := r.clk.Now()
	res, err := r.store.ProcessBatch(ctx, b)
	r.metrics.claimDuration.Observe(r.clk.Now().Sub(start).Seconds())
	if err != nil {
		r.stats.storeErrors.Add(1)
		l.storeHealth.Fault()
		level := slog.LevelDebug
		if l.storeHealth.Faults() == 1 {
			level = slog.LevelWarn
		}
		r.log.LogAttrs(ctx, level, "store call failed; will try again",
			slog.Int("outcomes", len(b.Completions)+len(b.Failures)+len(b.Releases)),
			slog.String("error", err.Error()))
		return nil, err
	}
	r.stats.batches.Add(1)
	l.storeHealth.Success()
	if res.DeadInstances > 0 {
		r.log.LogAttrs(ctx, slog.LevelWarn, "silent relay instances declared dead; their leases were released",
			slog.Int("dead_instances", res.DeadInstances))
	}
	return res, nil
}

// lostLeases logs the renewals the store refused: another instance may be
// delivering the message too. The delivery here goes on (at least once).
func (l *loop) lostLeases(stale, renewed []uuid.UUID) {
	if len(stale) == 0 || len(renewed) == 0 {
		return
	}
	asked := idSet(renewed)
	for _, id := range stale {
		f, ok := l.inflight[id]
		if _, was := asked[id]; !was || !ok || f.lost {
			continue
		}
		f.lost = true
		l.r.stats.leasesLost.Add(1)
		l.r.log.LogAttrs(context.Background(), slog.LevelWarn, "lease lost; delivery continues",
			slog.String("message_id", id.String()), slog.String("destination", f.m.Destination),
			slog.String("stream", f.m.Stream))
	}
}

// dispatch hands claimed messages to the workers: the messages of one
// ordered stream as one task, in Seq order; every other message alone.
func (l *loop) dispatch(claimed []*outbox.Message, probe bool) {
	if len(claimed) == 0 {
		return
	}
	r := l.r
	r.stats.claimed.Add(int64(len(claimed)))
	r.metrics.claimed.Add(float64(len(claimed)))
	streams := make(map[string]*task)
	var tasks []*task
	for _, m := range claimed {
		d := r.dests[m.Destination]
		l.inflight[m.ID] = &flight{m: m, dest: d, probe: probe}
		if d == nil {
			r.report(r.unknownDestination(m))
			continue
		}
		if probe {
			d.probes++
		}
		if m.Stream == "" || r.cfg.Store.EffectiveOrdering(m) == outbox.OrderingNone {
			tasks = append(tasks, &task{dest: d, msgs: []*outbox.Message{m}})
			continue
		}
		key := m.Destination + "\x00" + m.Stream
		if t, ok := streams[key]; ok {
			t.msgs = append(t.msgs, m)
			continue
		}
		t := &task{dest: d, msgs: []*outbox.Message{m}}
		streams[key] = t
		tasks = append(tasks, t)
	}
	for _, t := range tasks {
		r.sched.push(t)
	}
	r.log.LogAttrs(context.Background(), slog.LevelDebug, "claimed messages",
		slog.Int("count", len(claimed)), slog.Bool("probe", probe))
}

// untilRenew is the time left before the leases in flight are due for
// renewal.
func (l *loop) untilRenew() time.Duration {
	if len(l.inflight) == 0 {
		return math.MaxInt64
	}
	return max(l.lastRenew.Add(l.renewEvery).Sub(l.r.clk.Now()), 0)
}
