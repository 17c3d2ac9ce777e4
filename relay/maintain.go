package relay

import (
	"context"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/backstophq/backstop/store"
)

// With a store.Fleet store, maintenance is off the claim path: each relay
// heart-beats every HeartbeatInterval in a call of its own, and one relay
// of the fleet, the leader (a lease row in the store, held for half the
// InstanceTimeout and renewed at every heart-beat), declares silent
// instances dead and releases their leases, and sweeps delivered messages
// past the store's Retention, and the idempotency keys past their window,
// in batches of sweepBatch (sweep: while they come back full, for a share
// of the beat). When the leader dies another relay takes the
// lease once it lapses. Every relay also counts the messages waiting for
// destinations it does not know, every countEvery beats
// (unknown_destination_messages), with a warning the first time it sees
// each such destination. The leader also reads the store-wide gauges for
// the metrics (storeGauges in metrics.go), at most once per monitorEvery,
// after its beat; a relay without a fleet reads them every monitorEvery on
// the maintainer's goroutine. Either way a scrape never queries the store.
// A relay without a fleet also sweeps turn rows, expired idempotency keys
// and delivered messages past the Retention, and moves retries after a
// step back of the clock, every monitorEvery, and vacuums, as a leader
// does (maintainAlone): nothing else would.
const (
	sweepBatch   = 1000
	sweepBatches = 10
	// The leader's sweeps go on past their first sweepBatches full
	// batches until the beat has taken 1/sweepShare of HeartbeatInterval:
	// with a fixed number of batches a beat, rows expiring faster
	// (idempotency keys, delivered messages under Retention) outgrew the
	// sweep and their table grew for good.
	sweepShare = 2
	// countEvery is how many beats apart the relay counts the messages
	// waiting for unknown destinations: a count over the outbox, kept off
	// the start and rare.
	countEvery = 4
	// vacuumEvery is how often the leader asks a store.Vacuumer store to
	// vacuum the tables that need it.
	vacuumEvery = 5 * time.Second
)

// maintenance is the maintainer's state, read by Stats and the metrics.
type maintenance struct {
	leader atomic.Bool

	mu      sync.Mutex
	unknown map[string]int  // pending messages per unknown destination
	warned  map[string]bool // unknown destinations warned about

	gauges storeGauges
	parked signal // the maintainer's turns after which it waits for its timer
	// clockAt and storeAt are the relay's and the store's clocks as the
	// last beat read them, and stepHold the end of the hold-off after the
	// store's clock went forward (watchStoreClock). Only the maintainer's
	// goroutine touches them.
	clockAt, storeAt, stepHold time.Time
	// vacuumParked: the same for the vacuum's turns (vacuum).
	vacuumParked signal
}

// heartbeatEvery is the maintainer's cadence.
func (r *Relay) heartbeatEvery() time.Duration { return r.cfg.HeartbeatInterval }

// leaveTimeout bounds a stopping relay's last two fleet calls together:
// resigning its leadership and leaving the fleet, each one row.
const leaveTimeout = 2 * time.Second

// maintain runs the maintainer until stop is closed, then resigns the
// leadership it holds, leaves the fleet and closes done.
func (r *Relay) maintain(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	defer r.forgetGauges()
	// Its store calls end when stop closes: Run waits for the maintainer,
	// and a call on a connection that stopped answering kept a SIGTERMed
	// serve from exiting.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	if v, ok := r.store.(store.Vacuumer); ok && !r.cfg.NoVacuum {
		var vacuum sync.WaitGroup
		defer vacuum.Wait() // ctx ends with stop, and the vacuum with it
		vacuum.Go(func() { r.vacuum(ctx, v) })
	}
	if r.fleet == nil {
		r.maintainAlone(ctx, stop)
		return
	}
	for n := 0; ; n++ {
		if n > 0 { // Run made the first beat
			r.beat(ctx)
		}
		if n%countEvery == 1 { // not at the start: the drain of a backlog comes first
			r.countUnknown(ctx)
		}
		r.leaderGauges(ctx)
		t := r.clk.NewTimer(r.heartbeatEvery())
		r.maint.parked.set(uint64(n + 1))
		select {
		case <-stop:
			t.Stop()
			// Resigning and leaving share one leaveTimeout, after Run's
			// shutdown: each with finalCallTimeout of its own, a database
			// that stopped answering held a stopping serve 10 s past it.
			// A failure costs little: the lease of leadership lapses, and
			// the instance is counted out once it times out.
			rctx, rcancel := context.WithTimeout(context.Background(), leaveTimeout)
			defer rcancel()
			if r.maint.leader.Load() {
				_ = r.fleet.ResignLeadership(rctx, r.cfg.Instance.ID)
				r.maint.leader.Store(false)
			}
			r.leaveFleet(rctx)
			return
		case <-t.C():
		}
	}
}

// leaveFleet has a store.FleetLeaver store forget this instance as it
// stops (after Run's shutdown: the maintainer stops last), so that the
// relays left count it out of their RateLimit shares at their next beat.
func (r *Relay) leaveFleet(ctx context.Context) {
	fl, ok := r.store.(store.FleetLeaver)
	if !ok {
		return
	}
	if err := fl.LeaveFleet(ctx, r.cfg.Instance.ID); err != nil {
		r.log.LogAttrs(ctx, slog.LevelWarn, "leaving the fleet failed; the instance is counted until it times out",
			slog.String("error", err.Error()))
	}
}

// leaderGauges reads the store gauges when metrics are registered, this
// relay leads its fleet and its last reading is monitorEvery old; it
// forgets them when it does not lead.
func (r *Relay) leaderGauges(ctx context.Context) {
	if r.cfg.Metrics == nil {
		return
	}
	if !r.maint.leader.Load() {
		r.forgetGauges()
		return
	}
	if !r.gaugesFresh(r.clk.Now()) {
		r.readGauges(ctx)
	}
}

// maintainAlone is the maintainer of a relay without a fleet, which
// leads no one and is led by no one: every monitorEvery until stop is
// closed it reads the store gauges (when metrics are registered), has a
// store.ScheduleRebaser store move the retries scheduled before its clock
// was stepped back, and has a store.StreamTurnSweeper store sweep the turn
// rows of emptied streams, and a store with store.Fleet's sweeps delete
// the idempotency keys past their window and the delivered messages kept
// past the Retention (sweepExpired): what a fleet's leader does, and
// nothing else would. (Its vacuum runs as a leader's.)
func (r *Relay) maintainAlone(ctx context.Context, stop <-chan struct{}) {
	_, turns := r.store.(store.StreamTurnSweeper)
	_, rebases := r.store.(store.ScheduleRebaser)
	expiry, sweeps := r.store.(expirySweeper)
	if r.cfg.Metrics == nil && !turns && !rebases && !sweeps {
		return
	}
	for n := 0; ; n++ {
		if r.cfg.Metrics != nil {
			r.readGauges(ctx)
		}
		sctx, scancel := context.WithTimeout(ctx, storeCallTimeout)
		r.rebaseSchedules(sctx)
		if sweeps {
			r.sweepExpired(sctx, expiry, r.clk.Now().Add(monitorEvery/sweepShare))
		}
		r.sweepTurns(sctx)
		scancel()
		t := r.clk.NewTimer(monitorEvery)
		r.maint.parked.set(uint64(n + 1))
		select {
		case <-stop:
			t.Stop()
			return
		case <-t.C():
		}
	}
}

// leads says whether this relay does the fleet's maintenance: it leads
// its fleet, or it has none.
func (r *Relay) leads() bool { return r.fleet == nil || r.maint.leader.Load() }

// beat is one heart-beat with its maintenance.
func (r *Relay) beat(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, storeCallTimeout)
	defer cancel()
	f := r.fleet
	id := r.cfg.Instance.ID
	if err := f.Heartbeat(ctx, r.cfg.Instance); err != nil {
		r.log.LogAttrs(ctx, slog.LevelWarn, "heart-beat failed", slog.String("error", err.Error()))
	}
	r.watchStoreClock(ctx)
	held := r.clk.Now().Before(r.maint.stepHold)
	if !held {
		r.shareLimits(ctx)
	}
	lead, err := f.AcquireLeadership(ctx, id, r.cfg.Store.InstanceTimeout/2)
	if err != nil {
		r.log.LogAttrs(ctx, slog.LevelWarn, "leader election failed", slog.String("error", err.Error()))
	}
	if was := r.maint.leader.Swap(lead); was != lead {
		msg := "this instance no longer leads the fleet's maintenance"
		if lead {
			msg = "this instance leads the fleet's maintenance"
		}
		r.log.LogAttrs(ctx, slog.LevelInfo, msg, slog.String("instance", id))
	}
	if lead {
		if !held {
			r.reap(ctx, f, id)
		}
		r.rebaseSchedules(ctx)
		r.sweepExpired(ctx, f, r.clk.Now().Add(r.heartbeatEvery()/sweepShare)) // the sweeps' share of the beat
		r.sweepTurns(ctx)
	}
}

// reap has the store declare dead the instances silent for longer than
// its InstanceTimeout, freeing their leases.
func (r *Relay) reap(ctx context.Context, f store.Fleet, id string) {
	if n, err := f.ReapDeadInstances(ctx, id); err != nil {
		r.log.LogAttrs(ctx, slog.LevelWarn, "reaping dead instances failed", slog.String("error", err.Error()))
	} else if n > 0 {
		r.log.LogAttrs(ctx, slog.LevelWarn, "silent relay instances declared dead; their leases were released",
			slog.Int("dead_instances", n))
	}
}

// storeStepSlack is how much further than the relay's clock the store's
// may run between two beats before the relay takes it for a step
// forward: the store reads its clock during the call, the relay before
// it, so a slow call after a fast one shifts the readings by its length.
const storeStepSlack = 2 * time.Second

// watchStoreClock reads the store's clock (store.Admin's Now: the
// database's on PostgreSQL) at each beat, and when it ran further than
// the relay's since the last beat, by more than storeStepSlack, holds off
// for the store's InstanceTimeout what reads the heart-beats as of now:
// the reaping of silent instances and the count of the instances alive
// that divides the RateLimits. A heart-beat is stamped by the store's
// clock: stepped forward past the InstanceTimeout (NTP correcting the
// database host), every live relay's looked that much older, and the
// leader's next beat declared them all dead and freed their leases, which
// any relay then claimed while they were delivering them; and each relay,
// counting itself alone, took a whole RateLimit until the others
// heart-beat again. Within the hold-off the live ones heart-beat on the
// new clock; one silent after it is reaped one InstanceTimeout late.
// The relay's clock is read on its monotonic reading, which does not
// count a suspend of the relay's host: after one, the store's clock looks
// stepped forward too, and the reaping waits as well.
func (r *Relay) watchStoreClock(ctx context.Context) {
	sc, ok := r.store.(interface {
		Now(ctx context.Context) (time.Time, error)
	})
	if !ok {
		return
	}
	at := r.clk.Now()
	storeNow, err := sc.Now(ctx)
	if err != nil {
		return
	}
	storeNow = storeNow.Round(0) // what the store stamps: SQLite's reading has a monotonic one too
	mt := &r.maint
	if !mt.storeAt.IsZero() {
		if ahead := storeNow.Sub(mt.storeAt) - at.Sub(mt.clockAt); ahead > storeStepSlack {
			mt.stepHold = at.Add(r.cfg.Store.InstanceTimeout)
			r.log.LogAttrs(ctx, slog.LevelWarn, "the store's clock went forward: for an instance timeout no silent instance is declared dead and the rate limits' shares stay, so that live ones heart-beat on the new clock first",
				slog.Duration("ahead", ahead.Round(time.Millisecond)), slog.Duration("instance_timeout", r.cfg.Store.InstanceTimeout))
		}
	}
	mt.clockAt, mt.storeAt = at, storeNow
}

// expirySweeper is what sweepExpired needs of a store: store.Fleet's
// sweeps, which a relay without a fleet (NoFleet) calls on its store too.
type expirySweeper interface {
	SweepBatch(ctx context.Context, limit int) (int, error)
	SweepIdempotencyKeys(ctx context.Context, limit int) (int, error)
}

// sweepExpired has sw delete the idempotency keys past their window and,
// when the store keeps delivered messages for a Retention, those kept
// past it, each while its batches come back full until the time until
// (sweep). NoSweep turns both off.
func (r *Relay) sweepExpired(ctx context.Context, sw expirySweeper, until time.Time) {
	if r.cfg.NoSweep {
		return
	}
	n, err := r.sweep(ctx, until, sw.SweepIdempotencyKeys)
	if err != nil {
		r.log.LogAttrs(ctx, slog.LevelWarn, "sweeping idempotency keys failed", slog.String("error", err.Error()))
	} else if n > 0 {
		r.log.LogAttrs(ctx, slog.LevelDebug, "idempotency keys past their window deleted", slog.Int("keys", n))
	}
	if r.cfg.Store.Retention <= 0 {
		return
	}
	_, err = r.sweep(ctx, until, func(ctx context.Context, limit int) (int, error) {
		n, err := sw.SweepBatch(ctx, limit)
		r.stats.swept.Add(int64(n))
		return n, err
	})
	if err != nil {
		r.log.LogAttrs(ctx, slog.LevelWarn, "sweeping delivered messages failed", slog.String("error", err.Error()))
	}
}

// sweep calls batch with sweepBatch until it deletes less than that: at
// least sweepBatches times while the batches come back full, then on
// until the time until, so that the sweep keeps up with rows expiring
// faster than a fixed number of batches a beat deletes. It returns how
// many rows it deleted.
func (r *Relay) sweep(ctx context.Context, until time.Time, batch func(ctx context.Context, limit int) (int, error)) (int, error) {
	total := 0
	for i := 0; ; i++ {
		if i >= sweepBatches && !r.clk.Now().Before(until) {
			return total, nil
		}
		n, err := batch(ctx, sweepBatch)
		total += n
		if err != nil || n < sweepBatch {
			return total, err
		}
	}
}

// sweepTurns has a store.StreamTurnSweeper store delete the turn rows of
// emptied streams: at most sweepBatches windows of sweepBatch rows a beat,
// going round the table, so that a table of a million streams with
// messages waiting costs a beat ten windows, not its sweeps' share of the
// beat. Turn rows have no other sweeper: NoSweep (for deployments that
// sweep delivered messages themselves) leaves this one on.
func (r *Relay) sweepTurns(ctx context.Context) {
	ts, ok := r.store.(store.StreamTurnSweeper)
	if !ok {
		return
	}
	for range sweepBatches {
		n, err := ts.SweepStreamTurns(ctx, sweepBatch)
		if err != nil {
			r.log.LogAttrs(ctx, slog.LevelWarn, "sweeping the turn rows of emptied streams failed", slog.String("error", err.Error()))
			return
		}
		if n < sweepBatch { // round the whole table
			return
		}
	}
}

// countUnknown counts the messages waiting for destinations this relay
// does not know, and warns once per such destination: by name for the
// first maxUnknownWarnings new ones of a count, in one record for the
// others (rows anyone may write can name any number of them).
func (r *Relay) countUnknown(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, storeCallTimeout)
	defer cancel()
	pending, err := r.fleet.PendingByDestination(ctx)
	if err != nil {
		r.log.LogAttrs(ctx, slog.LevelWarn, "counting pending messages failed", slog.String("error", err.Error()))
		return
	}
	unknown := map[string]int{}
	for d, n := range pending {
		if _, ok := r.dests[d]; !ok && n > 0 {
			unknown[d] = n
		}
	}
	var fresh []string
	r.maint.mu.Lock()
	r.maint.unknown = unknown
	// warned keeps only the names still pending: it grew with every
	// unknown name ever seen (rows anyone may write).
	warned := make(map[string]bool, len(unknown))
	for d := range unknown {
		if !r.maint.warned[d] {
			fresh = append(fresh, d)
		}
		warned[d] = true
	}
	r.maint.warned = warned
	r.maint.mu.Unlock()
	sort.Strings(fresh)
	what, fate := "messages for a destination this relay does not know wait for a relay that does", "wait for a relay that does"
	if r.cfg.UnknownDestination == DeadLetterUnknown {
		what, fate = "messages for a destination this relay does not know are dead-lettered", "are dead-lettered"
	}
	for _, d := range fresh[:min(len(fresh), maxUnknownWarnings)] {
		r.log.LogAttrs(ctx, slog.LevelWarn, what, slog.String("destination", d), slog.Int("pending", unknown[d]))
	}
	if rest := fresh[min(len(fresh), maxUnknownWarnings):]; len(rest) > 0 {
		pending := 0
		for _, d := range rest {
			pending += unknown[d]
		}
		r.log.LogAttrs(ctx, slog.LevelWarn, "more destinations this relay does not know: their messages "+fate,
			slog.Int("destinations", len(rest)), slog.Int("pending", pending))
	}
}

// unknownPending returns a copy of the last counts of messages for unknown
// destinations.
func (r *Relay) unknownPending() map[string]int {
	r.maint.mu.Lock()
	defer r.maint.mu.Unlock()
	out := make(map[string]int, len(r.maint.unknown))
	for d, n := range r.maint.unknown {
		out[d] = n
	}
	return out
}

// maxUnknownWarnings bounds the destinations a count of unknown ones warns
// about by name; the others are counted in one record.
const maxUnknownWarnings = 20

// vacuum has a store.Vacuumer store vacuum its busy tables every
// vacuumEvery while this relay leads its fleet (or has none), until ctx
// ends. It runs on
// a goroutine of its own: a VACUUM takes seconds on a deep backlog, and
// the heart-beats must not wait for it. The store decides whether a table
// needs it, at the cost of one read of the database's statistics; the
// beat's cadence (15 s by default) let a busy outbox collect enough dead
// entries between vacuums to slow the claim.
func (r *Relay) vacuum(ctx context.Context, v store.Vacuumer) {
	failing := false // warned of a failure, not yet of the recovery
	for n := uint64(1); ; n++ {
		t := r.clk.NewTimer(vacuumEvery)
		r.maint.vacuumParked.set(n)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		if !r.leads() {
			continue
		}
		tables, err := v.Vacuum(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			// Once a failure streak: a database down would say it every
			// vacuumEvery otherwise.
			level := slog.LevelWarn
			if failing {
				level = slog.LevelDebug
			}
			r.log.LogAttrs(ctx, level, "vacuuming the store's tables failed", slog.String("error", err.Error()))
			failing = true
		case err == nil && failing:
			r.log.LogAttrs(ctx, slog.LevelInfo, "vacuuming the store's tables works again")
			failing = false
		}
		r.stats.vacuums.Add(int64(len(tables)))
	}
}

// rebaseSchedules has a store.ScheduleRebaser store move the retries and
// waits scheduled before its clock was stepped back to their delay from
// now: the leader's, at each beat (a clock reading when the clock was not
// stepped). Without it a retry due in a minute when the clock went back
// an hour ran an hour and a minute later, and the messages released when
// a destination's circuit opened waited the hour too.
func (r *Relay) rebaseSchedules(ctx context.Context) {
	rb, ok := r.store.(store.ScheduleRebaser)
	if !ok {
		return
	}
	n, err := rb.RebaseSchedules(ctx)
	if err != nil {
		r.log.LogAttrs(ctx, slog.LevelWarn, "moving retries after the clock went back failed; tried again at the next beat",
			slog.String("error", err.Error()))
		return
	}
	if n > 0 {
		r.log.LogAttrs(ctx, slog.LevelWarn, "the store's clock went back: retries and waits scheduled before are moved to their delay from now",
			slog.Int("messages", n))
	}
}

// shareLimits divides each destination's RateLimit among the fleet's
// instances alive, counted at each heart-beat (store.FleetCounter). A
// count that fails keeps the shares as they were.
func (r *Relay) shareLimits(ctx context.Context) {
	fc, ok := r.store.(store.FleetCounter)
	if !ok || !slices.ContainsFunc(r.destList, func(d *destination) bool { return d.limit != nil }) {
		return
	}
	n, err := fc.LiveInstances(ctx)
	if err != nil {
		r.log.LogAttrs(ctx, slog.LevelWarn, "counting the fleet's instances for the rate limits failed; the shares stay as they were",
			slog.String("error", err.Error()))
		return
	}
	for _, d := range r.destList {
		if d.limit != nil && d.limit.setShare(n) {
			r.log.LogAttrs(ctx, slog.LevelInfo, "rate limit divided among the fleet's instances alive",
				slog.String("destination", d.name), slog.Int("instances", max(n, 1)),
				slog.Float64("per_second", d.limit.rl.PerSecond/float64(max(n, 1))))
		}
	}
}
