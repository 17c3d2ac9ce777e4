package relay

import (
	"context"
	"log/slog"
	"math"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/tracker"
)

// storeCallTimeout bounds one store call on the wall clock, so that a hung
// connection cannot stall the relay for ever.
const storeCallTimeout = 30 * time.Second

// loop is the claimer: the goroutine that claims messages, renews the
// leases the relay holds, and hands messages to the workers. Outcomes are
// recorded by the recorder in calls of their own, so that a claim never
// waits for them. Only the claimer's goroutine touches a loop.
type loop struct {
	r         *Relay
	lastRenew time.Time
	lastCall  time.Time // the start of the last store call that succeeded
	lastSync  time.Time // the last reading of the shared circuits
	// asked is set when the last wait ended on a notification or its
	// timer rather than an internal wake-up: the round then calls the
	// store even with nothing to claim, as a poll (and, with a store
	// that is not a store.Fleet, a heart-beat).
	asked       bool
	renewEvery  time.Duration
	poll        time.Duration // the idle wait, doubled up to MaxPollInterval
	errWait     time.Duration // the wait after a failed store call
	storeHealth *tracker.Tracker
	round       uint64 // the number of the current round
	// gate is the store's store.WakeGate, nil when it has none; waiting
	// says the relay is registered there as waiting for a wake-up; busy,
	// that its last claim came back full or found no room, so it does not
	// register.
	gate    store.WakeGate
	waiting bool
	busy    bool
	pf      *prefetch
	failing bool                    // the last step's store call failed
	paces   map[*destination]*meter // each destination's pace, with several

	// size caps the rows of a claim call (its claim and renewals) after
	// the database cancelled one for running too long; shrunk says the
	// last call did so and halved the cap: the smaller call is made at
	// once.
	size   callSize
	shrunk bool
}

// waitGrace bounds the first wait after the relay registers as waiting
// (store.WakeGate): a writer that looked for waiters just before the
// registration and committed just after sent no wake-up, and the claim
// after this short wait finds its messages.
const waitGrace = 25 * time.Millisecond

func newLoop(r *Relay) *loop {
	gate, _ := r.store.(store.WakeGate)
	return &loop{
		gate:       gate,
		pf:         newPrefetch(&r.cfg, r.clk.Now()),
		r:          r,
		lastRenew:  r.clk.Now(),
		renewEvery: max(r.cfg.LeaseDuration/3, time.Millisecond),
		poll:       r.cfg.PollInterval,
		size:       callSize{what: "claim", max: r.cfg.MaxBatchSize, warned: &r.timeoutWarned, log: r.log},
		errWait:    r.cfg.PollInterval,
		storeHealth: tracker.New(tracker.Config{
			Name: "store", Logger: r.log, Clock: r.clk,
		}),
	}
}

// run makes rounds until ctx is done. A store call in progress when ctx
// ends is finished, not interrupted, so that the relay always knows what it
// has claimed, unless the database does not answer within ShutdownTimeout
// (Relay.stopCtx).
func (l *loop) run(ctx context.Context, notify <-chan struct{}) {
	cfg := &l.r.cfg
	storeCtx := l.r.stopCtx
	for ctx.Err() == nil {
		rd, err := l.step(storeCtx, true)
		var wait time.Duration
		switch {
		case err != nil && l.shrunk:
			l.shrunk = false
			continue
		case err != nil:
			wait = l.errWait
			l.errWait = min(2*l.errWait, cfg.MaxPollInterval)
		case rd.limit > 0 && rd.claimed == rd.limit || rd.skipped:
			// A full claim, or no room for one: the relay is busy and
			// claims again as soon as it has room, so writers need not wake
			// it; it registers again once a claim comes back short. Before,
			// a full claim that left too little room kept the relay
			// registered, and every writer went on notifying a relay that
			// had no room to take what they wrote.
			l.busy = true
			l.setWaiting(storeCtx, false)
			if !rd.skipped && l.free() >= l.claimMin() {
				continue // more is probably waiting
			}
			l.poll = cfg.PollInterval
			wait = l.poll
		case rd.quarantined > 0 && l.free() > 0:
			// Rows the store could not deliver took the claim's place (one
			// over the sizes a message may carry is claimed alone): what
			// is behind them is claimed at once, not after a poll.
			continue
		case rd.claimed > 0:
			l.busy = false
			l.poll = cfg.PollInterval
			wait = l.poll
		default:
			l.busy = false
			wait = l.poll
			l.poll = min(2*l.poll, cfg.MaxPollInterval)
		}
		if err == nil {
			l.errWait = cfg.PollInterval
		}
		l.failing = err != nil
		notify = l.block(ctx, notify, wait)
	}
}

// block waits for a wake-up, a notification, ctx, or wait (shortened to
// the next lease renewal or probe). It returns notify, or nil once that
// channel is closed.
func (l *loop) block(ctx context.Context, notify <-chan struct{}, wait time.Duration) <-chan struct{} {
	r := l.r
	if notify != nil && !l.waiting && !l.busy && l.setWaiting(l.r.stopCtx, true) {
		wait = min(wait, waitGrace)
	}
	t := r.clk.NewTimer(l.shortened(wait))
	defer t.Stop()
	r.turned.set(l.round)
	r.roundDone()
	if r.fl.len() == 0 && !r.pendingOutcomes() {
		r.idle.set(l.round)
	}
	l.asked = true
	select {
	case <-ctx.Done():
	case <-r.wakeCh:
		l.asked = false
	case _, ok := <-notify:
		if !ok {
			return nil
		}
		l.poll = r.cfg.PollInterval
		// Woken by a writer, the relay stays registered: leaving and
		// coming back would cost two store calls a wake-up, the first on
		// the way to the claim. It leaves once its claims come back full.
	case <-t.C():
	}
	return notify
}

// setWaiting registers the relay as waiting for wake-ups, or ends its
// registration, when the store has a store.WakeGate and the state
// changes, and reports whether the relay is now registered. A failed call
// leaves the state as it was: unregistered, the relay still polls;
// registered, writers notify it a little longer than needed.
func (l *loop) setWaiting(ctx context.Context, waiting bool) bool {
	if l.gate == nil || l.waiting == waiting {
		return l.waiting
	}
	ctx, cancel := context.WithTimeout(ctx, storeCallTimeout)
	defer cancel()
	if err := l.gate.SetWaiting(ctx, l.r.cfg.Instance.ID, waiting); err != nil {
		l.r.log.LogAttrs(ctx, slog.LevelDebug, "registering as waiting for wake-ups failed",
			slog.Bool("waiting", waiting), slog.String("error", err.Error()))
		return l.waiting
	}
	l.waiting = waiting
	return waiting
}

// round is what one step did.
type round struct {
	limit       int  // messages the main claim asked for
	claimed     int  // messages it got
	quarantined int  // rows it quarantined (store.Result.Quarantined)
	skipped     bool // the claim was put off: too little room for it
}

// free is how many more messages the relay may hold (prefetch.room).
func (l *loop) free() int {
	n, bytes, _ := l.r.fl.heldBudget()
	return l.pf.room(n, bytes)
}

// bytesLeft is what a claim may bring back in bytes, and whether its
// first message may be of any size (prefetch.bytesLeft).
func (l *loop) bytesLeft() (int64, bool) {
	_, bytes, big := l.r.fl.heldBudget()
	return l.pf.bytesLeft(bytes, big)
}

// claimMin is the least room worth a claim while the workers have
// enough queued: an eighth of the prefetch's target, so that a relay
// with a full buffer does not claim one message per recorded outcome.
func (l *loop) claimMin() int { return max(l.pf.target()/8, 1) }

// step renews the leases due for renewal and, when claim is set, claims
// work: one call for the destinations whose circuit is closed and one
// probe call for each destination due for a probe.
func (l *loop) step(ctx context.Context, claim bool) (round, error) {
	r := l.r
	l.round = r.rounds.Add(1)
	now := r.clk.Now()
	if claim {
		l.syncFleet(ctx, now, false)
		_, _, ended := r.fl.held()
		l.pf.observe(now, ended)
		l.observePaces(now)
		r.stats.prefetch.Store(int64(l.pf.target()))
	}
	b := &store.Batch{Instance: r.cfg.Instance, SkipMaintenance: r.fleet != nil,
		Claim: store.ClaimRequest{Lease: r.cfg.LeaseDuration}}
	var renewed []uuid.UUID
	partial := false // renewing only the leases that lapse first
	if now.Sub(l.lastRenew) >= l.renewEvery {
		renewed = r.fl.renewable()
		if n := l.size.fit(len(renewed)); n < len(renewed) {
			renewed, partial = r.fl.soonest(renewed, n), true
		}
		b.RenewLeases = renewed
		l.watchOverdue(now)
	}
	var probes []*destination
	var rd round
	if claim {
		var exclude []string
		exclude, probes = l.breakerPlan(now)
		free := l.free()
		if free >= l.claimMin() || r.fl.len() < r.cfg.Workers {
			b.Claim.Limit = max(free-len(probes), 0)
		} else {
			rd.skipped = free > 0
		}
		b.Claim.MaxBytes, b.Claim.FirstAnySize = l.bytesLeft()
		b.Claim.ExcludeDestinations = exclude
		b.Claim.PerDestination = l.perDestination()
		if r.cfg.UnknownDestination != DeadLetterUnknown {
			b.Claim.Destinations = l.closedDestinations(exclude)
			if len(b.Claim.Destinations) == 0 {
				b.Claim.Limit = 0
			}
		}
	}
	// A capped call's renewals go first: leases lapsing would let another
	// instance deliver what this one holds.
	b.Claim.Limit = l.size.fit(len(renewed)+b.Claim.Limit) - len(renewed)
	rd.limit = b.Claim.Limit
	// The leases given back go ahead of the claim, in the same call (see
	// Relay.giveBack).
	givenBack := r.takeGivenBack()
	if len(givenBack) > 0 {
		// not renewed in the same call: the release ends the lease
		back := make(map[uuid.UUID]bool, len(givenBack))
		for i := range givenBack {
			givenBack[i].addTo(b)
			back[givenBack[i].m.ID] = true
		}
		renewed = slices.DeleteFunc(renewed, func(id uuid.UUID) bool { return back[id] })
		b.RenewLeases = renewed
	}
	// A claim of unordered messages may commit without waiting for the
	// disk while no lease renewed with it holds a stream's order.
	b.LazyCommit = !r.fl.anyOrdered(renewed)
	// Every round that claims, renews, gives leases back, was asked for (a
	// notification, the poll timer) or has not called the store for a poll
	// interval makes a call.
	if b.Claim.Limit > 0 || len(renewed) > 0 || len(givenBack) > 0 ||
		(claim && (l.asked || now.Sub(l.lastCall) >= r.cfg.PollInterval)) {
		r.fl.watch(true)
		res, start, err := l.call(ctx, b)
		if err != nil {
			r.fl.watch(false)
			// The recorder tries them again, on its own calls: one the
			// store refuses cannot hold up the claims.
			r.report(givenBack...)
			return rd, err
		}
		// Before the claim's messages are dispatched: one of them given
		// back here is then no longer in flight, and is delivered. A
		// claim since the give-back was queued may have taken one back
		// (reclaimed); its lease was the relay's, and this release, after
		// every earlier write of the relay's on the message, ended it:
		// there is nothing left to give back. Given back once more, each
		// call's claim took it again, and the next call gave it back.
		r.fl.mu.Lock()
		for i := range givenBack {
			if f, ok := r.fl.m[givenBack[i].m.ID]; ok {
				f.reclaimed = false
			}
		}
		r.fl.mu.Unlock()
		r.settleResult(givenBack, res)
		l.lastCall = now
		if !partial && (len(renewed) > 0 || now.Sub(l.lastRenew) >= l.renewEvery) {
			l.lastRenew = now
		}
		l.renewed(renewed, res, start)
		l.pf.claimed(res.Claimed)
		l.dispatch(res.Claimed, false, start, res.Now)
		r.fl.bound(start, res.Now)
		r.fl.watch(false)
		rd.claimed = len(res.Claimed)
		rd.quarantined = len(res.Quarantined)
	}
	for _, d := range probes {
		n := l.size.fit(min(d.halfOpenMax-d.probing(), l.free()))
		if n <= 0 || !l.takeProbe(ctx, d, now) {
			continue
		}
		r.fl.watch(true)
		maxBytes, firstAny := l.bytesLeft()
		res, start, err := l.call(ctx, &store.Batch{Instance: r.cfg.Instance, SkipMaintenance: r.fleet != nil, Claim: store.ClaimRequest{
			Limit: n, Lease: r.cfg.LeaseDuration, Destinations: []string{d.name},
			MaxBytes: maxBytes, FirstAnySize: firstAny,
		}})
		if err != nil {
			r.fl.watch(false)
			return rd, err
		}
		d.probeClaimed(now, len(res.Claimed))
		l.dispatch(res.Claimed, true, start, res.Now)
		r.fl.bound(start, res.Now)
		r.fl.watch(false)
	}
	r.stats.inFlight.Store(int64(r.fl.len()))
	return rd, nil
}

// call makes one store call and accounts for it. It returns, with the
// result, when the call started on the relay's clock.
func (l *loop) call(parent context.Context, b *store.Batch) (res *store.Result, start time.Time, err error) {
	r := l.r
	ctx, cancel := context.WithTimeout(parent, storeCallTimeout)
	defer cancel()
	start = r.clk.Now()
	res, err = r.store.ProcessBatch(ctx, b)
	r.metrics.claimDuration.Observe(r.clk.Now().Sub(start).Seconds())
	rows := b.Claim.Limit + len(b.RenewLeases)
	if err != nil {
		r.stats.storeErrors.Add(1)
		if timedOutErr(parent, err) && l.size.timedOut(start, rows, err) {
			// not a fault of the store's: it answers, to smaller calls
			l.shrunk = true
			return nil, start, err
		}
		l.storeHealth.Fault()
		level := slog.LevelDebug
		// A call that ran too long, when the relay has said so at WARN
		// once already, is said again at DEBUG only: with a tight
		// statement_timeout on a loaded database a call no larger than
		// the last one that succeeded times out now and then, and each
		// was a WARN after a success (15 in 23 s at 40 ms). The store
		// tracker still warns when calls keep failing.
		if l.storeHealth.Faults() == 1 && (!timedOutErr(parent, err) || r.timeoutWarned.CompareAndSwap(false, true)) {
			level = slog.LevelWarn
		}
		r.log.LogAttrs(ctx, level, "store call failed; will try again",
			slog.Int("renewals", len(b.RenewLeases)), slog.Int("claim", b.Claim.Limit),
			slog.String("error", err.Error()))
		return nil, start, err
	}
	r.stats.batches.Add(1)
	l.storeHealth.Success()
	l.size.succeeded(start, rows)
	if len(res.Quarantined) > 0 {
		r.quarantined(ctx, res.Quarantined)
	}
	if res.DeadInstances > 0 {
		r.log.LogAttrs(ctx, slog.LevelWarn, "silent relay instances declared dead; their leases were released",
			slog.Int("dead_instances", res.DeadInstances))
	}
	return res, start, nil
}

// renewed extends the leases the store renewed (the call started at
// start) to what the store granted (see flight.until), and marks lost
// those it refused: another instance may be delivering the message. A
// delivery in progress goes on (at least once); one not yet started will
// not start.
func (l *loop) renewed(renewed []uuid.UUID, res *store.Result, start time.Time) {
	if len(renewed) == 0 {
		return
	}
	r := l.r
	refused := idSet(res.Stale)
	deferred := idSet(res.Deferred) // locked elsewhere: held, not renewed
	expiries := make(map[uuid.UUID]time.Time, len(res.Renewed))
	for _, le := range res.Renewed {
		expiries[le.ID] = le.Expiry
	}
	var lost []*flight
	r.fl.mu.Lock()
	for _, id := range renewed {
		f, ok := r.fl.m[id]
		if !ok || f.lost {
			continue
		}
		if _, later := deferred[id]; later {
			continue
		}
		if _, no := refused[id]; no {
			if f.reported {
				// Its outcome went to the recorder, which may have
				// recorded it while this renewal ran: the refusal is
				// that record, not a lost lease. A lease truly lost
				// shows when the outcome is recorded (Result.Stale).
				continue
			}
			f.lost = true
			lost = append(lost, &flight{m: f.m, started: f.started})
			continue
		}
		expiry := expiries[id]
		if !expiry.IsZero() {
			f.expiry = expiry
		}
		if until := leaseUntil(start, expiry, res.Now, r.cfg.LeaseDuration); until.After(f.until) {
			f.until = until
		}
	}
	r.fl.mu.Unlock()
	for _, f := range lost {
		r.stats.leasesLost.Add(1)
		msg := "lease lost; the message will not be started here"
		if f.started {
			msg = "lease lost; delivery continues"
		}
		r.log.LogAttrs(context.Background(), slog.LevelWarn, msg,
			slog.String("message_id", f.m.ID.String()), slog.String("destination", f.m.Destination),
			slog.String("stream", f.m.Stream))
	}
}

// dispatch hands claimed messages to the workers: the messages of one
// ordered stream as one task, in Seq order; every other message alone. A
// message the relay already holds is not delivered a second time (see
// flight.reclaimed). The claim call started at start on the relay's clock
// and found the store's clock at storeNow (zero: the store did not say).
func (l *loop) dispatch(claimed []*outbox.Message, probe bool, start, storeNow time.Time) {
	if len(claimed) == 0 {
		return
	}
	r := l.r
	r.stats.claimed.Add(int64(len(claimed)))
	r.metrics.claimed.Add(float64(len(claimed)))
	streams := make(map[string]*task)
	// held are the streams of which this claim returned a message this
	// relay already had in flight (its lease had lapsed) or had just
	// settled: the claim read the stream from there, so what it returned
	// behind that message must wait for the flight here, not become a
	// task of its own that a free worker would deliver first.
	var held map[string]bool
	var tasks []*task
	var giveBack, unknown []outcome
	// A claim stops at the bytes the budget leaves (bytesLeft), as the
	// store counts them, its first message of any size; the relay counts
	// more for headers (their memory besides their names and values), and
	// a store may not bound its claim at all. What the claim returned past
	// the budget, but its first message, is given back at once; every
	// message after it with it, so that a stream's messages kept here are
	// a prefix. A message larger than the budget by itself is not counted
	// in it (heldBudget); one that is not first is past it all the same.
	_, heldBytes, _ := r.fl.heldBudget()
	over, first := false, true
	r.fl.mu.Lock()
	for _, m := range claimed {
		d := r.dests[m.Destination]
		until := leaseUntil(start, m.LeaseExpiry, storeNow, r.cfg.LeaseDuration)
		ordered := m.Stream != "" && r.cfg.Store.EffectiveOrdering(m) != outbox.OrderingNone
		var key string
		if ordered {
			key = m.Destination + "\x00" + m.Stream
		}
		if f, ok := r.fl.m[m.ID]; ok {
			// Claimed again while in flight here: its lease had lapsed.
			// The claim renewed it, for the flight that already has it.
			f.lost = false
			f.until, f.expiry = until, m.LeaseExpiry
			if f.reported {
				f.reclaimed = true
			}
			r.stats.reclaimed.Add(1)
			if ordered {
				held = hold(held, key)
			}
			continue
		}
		f := &flight{m: m, dest: d, probe: probe, until: until, expiry: m.LeaseExpiry}
		r.fl.add(f)
		if _, ok := r.fl.recent[m.ID]; ok {
			// Its outcome was recorded while this claim was under way:
			// give the new lease back rather than deliver it again.
			f.reported = true
			giveBack = append(giveBack, outcome{m: m, dest: d, kind: released, cause: causeReclaimed})
			r.stats.reclaimed.Add(1)
			if ordered {
				held = hold(held, key)
			}
			continue
		}
		if ordered && held[key] {
			// Behind a message of its stream in flight here: given back,
			// to be claimed once the flight ends (the store's claim stops
			// at the renewed lease until then).
			f.reported = true
			giveBack = append(giveBack, outcome{m: m, dest: d, kind: released, cause: causeReclaimed})
			continue
		}
		if d == nil {
			f.reported = true
			unknown = append(unknown, r.unknownDestination(m))
			continue
		}
		if !probe && !over && !first && heldBytes+f.bytes > r.cfg.PrefetchBytes {
			over = true
		}
		first = false
		if over {
			f.reported = true
			giveBack = append(giveBack, outcome{m: m, dest: d, kind: released, cause: causeOverBudget})
			continue
		}
		if !r.fl.isBig(f.bytes) {
			heldBytes += f.bytes
		}
		if !ordered {
			tasks = append(tasks, &task{dest: d, msgs: []*outbox.Message{m}, probe: probe})
			continue
		}
		if t, ok := streams[key]; ok {
			t.msgs = append(t.msgs, m)
			continue
		}
		t := &task{dest: d, msgs: []*outbox.Message{m}, probe: probe}
		streams[key] = t
		tasks = append(tasks, t)
	}
	r.fl.mu.Unlock()
	r.report(unknown...)
	r.giveBack(giveBack...)
	for _, t := range tasks {
		if !r.sched.push(t) {
			r.report(shutdownRelease(t.dest, t.msgs)...)
		}
	}
	r.log.LogAttrs(context.Background(), slog.LevelDebug, "claimed messages",
		slog.Int("count", len(claimed)), slog.Bool("probe", probe))
}

// watchOverdue says, once each, which deliveries have not returned
// overdueGrace past their Timeout, and counts those that have not yet.
// The relay cannot stop a transport that ignores its context: the worker
// stays held and the lease renewed (giving it up would let another
// instance deliver the message while this one may still), so the
// operator has to be told.
func (l *loop) watchOverdue(now time.Time) {
	r := l.r
	fresh, n := r.fl.overdueAt(now)
	r.stats.overdue.Store(int64(n))
	for _, f := range fresh {
		r.log.LogAttrs(context.Background(), slog.LevelWarn,
			"delivery overdue: the transport has not returned well past its timeout; it may ignore its context (the worker stays held and the lease renewed until it returns)",
			slog.String("message_id", f.m.ID.String()), slog.String("destination", f.m.Destination),
			slog.String("stream", f.m.Stream), slog.Duration("timeout", f.dest.timeout),
			slog.Duration("running_for", now.Sub(f.startedAt)))
	}
}

// hold adds key to the set held, making it when nil.
func hold(held map[string]bool, key string) map[string]bool {
	if held == nil {
		held = make(map[string]bool)
	}
	held[key] = true
	return held
}

// shortened is wait shortened to the next lease renewal or probe, unless
// the last store call failed: then the error's back-off stands, since a
// renewal could not succeed either. Before, a renewal that was due (its
// time is only moved by a call that succeeds) made every wait zero while
// the store was down and deliveries were in flight: the claimer spun at
// full CPU and logged a thousand lines a second. Nor does a probe that is
// due shorten it while the relay has no room to claim one: a flight that
// ends makes room and wakes the claimer. Before, with the buffer full of
// another destination's slow deliveries (or of large payloads), the due
// probe made every wait zero and each round polled the store.
func (l *loop) shortened(wait time.Duration) time.Duration {
	if l.failing {
		return wait
	}
	wait = min(wait, l.untilRenew())
	if l.free() > 0 {
		wait = min(wait, l.untilProbe())
	}
	return wait
}

// untilRenew is the time left before the leases in flight are due for
// renewal.
func (l *loop) untilRenew() time.Duration {
	if l.r.fl.len() == 0 {
		return math.MaxInt64
	}
	return max(l.lastRenew.Add(l.renewEvery).Sub(l.r.clk.Now()), 0)
}

// perDestination caps each destination's share of a claim when there are
// several, so that a slow destination never fills the buffer, nor leases
// minutes of work that another relay of the fleet could do: at most its
// room, less what it holds. Its room is an equal share of the prefetch's
// target, or less, what it delivers in paceHorizon (l.paces), and never
// below four times its Concurrency. A destination with a RateLimit, even
// alone, has at most what its limit starts within a LeaseDuration
// (limiter.leased): its messages wait here for their tokens, and more would
// be leases hoarded from the other relays of a fleet.
func (l *loop) perDestination() map[string]int {
	r := l.r
	limited := slices.ContainsFunc(r.destList, func(d *destination) bool { return d.limit != nil })
	if len(r.destList) < 2 && !limited {
		return nil
	}
	held := make(map[*destination]int, len(r.destList))
	r.fl.mu.Lock()
	for _, f := range r.fl.m {
		if f.dest != nil {
			held[f.dest]++
		}
	}
	r.fl.mu.Unlock()
	out := make(map[string]int, len(r.destList))
	size := l.pf.target()
	for _, d := range r.destList {
		room := size
		if len(r.destList) > 1 {
			paced := int(math.Ceil(l.pace(d).rate * paceHorizon.Seconds()))
			room = max(min(size/len(r.destList), paced), min(size, 4*d.concurrency))
		}
		if d.limit != nil {
			room = min(room, d.limit.leased(r.cfg.LeaseDuration))
		}
		out[d.name] = max(room-held[d], 0)
	}
	return out
}

// paceHorizon is how much of a destination's own pace a relay leases for
// it when it has several (perDestination): a destination delivering 10
// messages a second beside a fast one held 2,048 messages, over three
// minutes of its work, when its room was an equal share of a prefetch the
// fast one had grown.
const paceHorizon = 2 * prefetchHorizon

// pace is d's meter of flights ended, created on first use.
func (l *loop) pace(d *destination) *meter {
	m := l.paces[d]
	if m == nil {
		if l.paces == nil {
			l.paces = make(map[*destination]*meter)
		}
		m = &meter{at: l.r.clk.Now()}
		l.paces[d] = m
	}
	return m
}

// observePaces takes each destination's count of flights ended at now.
func (l *loop) observePaces(now time.Time) {
	if len(l.r.destList) < 2 {
		return
	}
	for _, d := range l.r.destList {
		ended := d.stats.delivered.Load() + d.stats.failed.Load() + d.stats.released.Load()
		l.pace(d).observe(now, uint64(ended))
	}
}
