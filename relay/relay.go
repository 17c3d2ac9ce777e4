// Package relay is Backstop's delivery engine: it claims messages from a
// store, delivers them through their destination's Transport, and records
// what happened, so that nothing is lost and nothing is dropped silently.
//
// One goroutine coordinates. It calls store.ProcessBatch again and again;
// each call carries the outcomes the workers reported since the last one,
// renews the leases of the messages still being worked, and claims as many
// new messages as there is room for. Claimed messages go to a pool of
// workers: the messages of one (destination, stream) claimed together are
// delivered one after the other in Seq order, different streams in
// parallel, up to each destination's Concurrency. In a strictly ordered
// stream a message is sent only once the store has recorded the delivery
// of the one before it, so that a relay that stalls past its lease never
// leaves behind a later message that a re-send of an earlier one, by
// another instance, would arrive after.
//
// Each delivery attempt passes the destination's circuit breaker, makes up
// to a few quick in-process tries for blips, and ends in one of:
//
//   - delivered: the message is marked Published;
//   - a retryable fault of the destination (an outage, a timeout, a 5xx, a
//     429): the message is given back without charging an attempt, to be
//     tried when the destination's back-off has passed; the destination's
//     tracker and breaker count the fault, and an open breaker stops the
//     relay claiming for that destination until a single probe succeeds;
//   - a retryable fault of the message: an attempt is charged and the store
//     schedules the next one; at the destination's MaxAttempts the message
//     is dead-lettered as a poison message;
//   - a permanent fault, or one nobody classified (unless the classifier
//     treats unknown errors as transient): the message is dead-lettered at
//     once with its reason.
//
// A failure in a strictly ordered stream gives back the later messages of
// that stream claimed with it, undelivered (seed 000's cascade release);
// under release ordering they go on. When Run's context ends the relay
// stops claiming, gives back what it has not started, waits a while for
// deliveries in progress and records every outcome before it returns.
package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/backstophq/backstop/circuitbreaker"
	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/retry"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/tracker"
	"github.com/backstophq/backstop/transport"
)

// ErrAlreadyRun is returned by Run when the Relay has run before: a Relay
// runs once.
var ErrAlreadyRun = errors.New("relay: Run called more than once")

// Relay delivers the messages of a store. Create it with New and start it
// with Run. Its methods are safe for concurrent use.
type Relay struct {
	cfg        Config
	store      store.Store
	clk        clock.Clock
	log        *slog.Logger
	classifier *errorhandling.ErrorClassifier
	dests      map[string]*destination
	destList   []*destination // sorted by name
	trackers   *tracker.Registry
	singled    *tracker.Registry // messages' trackers (singledout.go)
	metrics    *metrics
	stats      counters

	mu       sync.Mutex
	outcomes []outcome // reported by workers, not yet taken by the recorder
	// givenBack are the leases the relay gives back because it already
	// had their message (causeReclaimed), for the loop's next store call
	// (see giveBack).
	givenBack []outcome
	wakeCh    chan struct{}
	recordCh  chan struct{} // wakes the recorder
	fl        *flights
	fleet     store.Fleet // the store, when it implements store.Fleet
	fleetQ    fleetOps
	maint     maintenance
	stalls    stalls
	// startMargin is the least lease left for a delivery to start.
	startMargin time.Duration

	// recSize caps the outcomes of a recording call after the database
	// cancelled one for running too long: the recorder's, then, once it
	// has returned, the shutdown's.
	recSize callSize
	// timeoutWarned says a store call that ran too long was logged at
	// WARN (callSize): once for the relay.
	timeoutWarned atomic.Bool

	sched            *scheduler
	workers          sync.WaitGroup
	stopping         atomic.Bool
	deliverCtx       context.Context // parent of every delivery's context
	cancelDeliveries context.CancelFunc
	// deliveriesEnded is when cancelDeliveries first ran, on the wall
	// clock: an attempt past its deadline before then timed out, one
	// asked only afterwards included (attemptCtx.deadlineWon).
	deliveriesEnded atomic.Pointer[time.Time]
	// stopCtx is the parent of the claimer's and the recorder's store
	// calls: not done with Run's context, so that a call in progress ends
	// and the relay knows what it claimed, but done ShutdownTimeout (on
	// the wall clock) after it, so that a database that stopped answering
	// cannot hold the process past the shutdown it was given.
	stopCtx context.Context

	started atomic.Bool
	rounds  atomic.Uint64 // rounds (steps) the loop has started
	turned  signal        // the last round after which the loop waited
	// lastRound is when the loop last finished a round (LastRound), as
	// the relay's clock read it (with its monotonic reading, on the real
	// clock); nil before Run.
	lastRound atomic.Pointer[time.Time]
	idle      signal // the last round after which it waited idle
	hooks     hooks
}

// destination is a configured destination with its machinery.
type destination struct {
	name        string
	tr          transport.Transport
	exec        *retry.Executor
	breaker     *circuitbreaker.CircuitBreaker
	halfOpenMax int
	openFor     time.Duration // the breaker's Timeout
	timeout     time.Duration
	concurrency int
	limit       *limiter // nil: no RateLimit
	stats       destCounters
	m           destMetrics

	firstProbe time.Duration
	maxProbe   time.Duration
	// singledOutAfter is Destination.SingledOutAfter; negative: never.
	singledOutAfter time.Duration
	gate            gate

	running int // tasks in progress; guarded by the scheduler's mutex
}

// hooks let the package's tests observe the relay without sleeping.
type hooks struct {
	onShutdown func() // after unstarted messages were given back
	onCancel   func() // after deliveries were cancelled at the deadline
	// onWait runs when a worker has handed the delivery of m to the
	// recorder, and the rest of m's strict stream waits for it to be
	// recorded.
	onWait func(m *outbox.Message)
}

// markerClassifier is the in-process executor's classifier. The relay
// decides what is retried with its own classifier and tells the executor
// through the Permanent, Transient and Recognised markers, which a
// classifier without user rules always obeys.
var markerClassifier = errorhandling.NewErrorClassifier()

// New returns a Relay delivering the messages of s as cfg says. cfg has its
// defaults applied and is validated; the error names the first bad field.
// When cfg.Metrics is set the relay's metrics are registered on it.
func New(s store.Store, cfg Config) (*Relay, error) {
	if s == nil {
		return nil, fmt.Errorf("relay: store is nil")
	}
	cfg = cfg.withDefaults(s)
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := &Relay{
		stopCtx:    context.Background(), // Run sets its own
		cfg:        cfg,
		store:      s,
		clk:        cfg.Clock,
		log:        cfg.Logger,
		classifier: cfg.Classifier,
		dests:      make(map[string]*destination, len(cfg.Destinations)),
		trackers:   tracker.NewRegistry(cfg.Tracker),
		singled:    newSingledOut(&cfg),
		wakeCh:     make(chan struct{}, 1),
		recordCh:   make(chan struct{}, 1),
		fl:         newBudgetFlights(cfg.PrefetchBytes),
	}
	r.recSize = callSize{what: "record", max: maxRecord, warned: &r.timeoutWarned, log: r.log}
	r.startMargin = min(cfg.LeaseDuration/10, time.Second)
	if f, ok := s.(store.Fleet); ok && !cfg.NoFleet {
		r.fleet = f
	}
	r.metrics = newMetrics()
	for name, d := range cfg.Destinations {
		r.dests[name] = r.newDestination(name, d)
	}
	for _, d := range r.dests {
		r.destList = append(r.destList, d)
	}
	sort.Slice(r.destList, func(i, j int) bool { return r.destList[i].name < r.destList[j].name })
	r.sched = newScheduler(r.destList, r.cfg.Workers, r.clk)
	if cfg.Metrics != nil {
		if err := r.metrics.register(cfg.Metrics, r); err != nil {
			return nil, fmt.Errorf("relay: Metrics: %w", err)
		}
	}
	r.stats.prefetch.Store(int64(r.cfg.BatchSize))
	return r, nil
}

func (r *Relay) newDestination(name string, cfg Destination) *destination {
	d := &destination{
		name:            name,
		tr:              cfg.Transport,
		halfOpenMax:     cfg.Breaker.HalfOpenMaxRequests,
		openFor:         cfg.Breaker.Timeout,
		firstProbe:      cfg.FirstProbe,
		singledOutAfter: cfg.SingledOutAfter,
		maxProbe:        cfg.MaxProbeInterval,
		timeout:         cfg.Timeout,
		concurrency:     cfg.Concurrency,
		limit:           newLimiter(cfg.RateLimit),
		m:               r.metrics.forDestination(name),
	}
	if d.openFor == 0 {
		d.openFor = circuitbreaker.DefaultTimeout
	}
	br := *cfg.Breaker
	br.Timeout = breakerNeverHalfOpens // the gate probes (breakers.go)
	user := br.OnStateChange
	br.OnStateChange = func(from, to circuitbreaker.State) {
		if to == circuitbreaker.StateOpen {
			d.stats.trips.Add(1)
		}
		if user != nil {
			r.onStateChange(d.name, user, from, to)
		}
		if to == circuitbreaker.StateClosed {
			// Only a Reset closes the breaker (it never half-opens): the
			// gate's own, after a good probe, which has closed the gate
			// already, or an operator's (Breaker), which must resume the
			// deliveries too: before, the gate stayed open until its next
			// probe.
			r.breakerReset(d)
		}
	}
	d.breaker = circuitbreaker.New(&br)
	in := *cfg.InProcess
	in.Classifier = markerClassifier
	d.exec = retry.NewExecutor(&in)
	return d
}

// onStateChange calls a destination's Breaker.OnStateChange. The hook is
// the operator's code, called where the breaker records an outcome (on a
// worker, or in an admin API's reset): a panic in it is logged at ERROR
// with its stack and goes no further, and the breaker has changed state
// all the same.
func (r *Relay) onStateChange(destination string, hook func(from, to circuitbreaker.State), from, to circuitbreaker.State) {
	defer func() {
		if p := recover(); p != nil {
			r.log.LogAttrs(context.Background(), slog.LevelError, "a breaker's OnStateChange panicked",
				slog.String("destination", destination), slog.String("from", from.String()), slog.String("to", to.String()),
				slog.String("panic", fmt.Sprint(p)), slog.String("stack", string(debug.Stack())))
		}
	}()
	hook(from, to)
}

// Config returns a copy of the relay's configuration, defaults applied.
func (r *Relay) Config() Config { return r.cfg.clone() }

// Breaker returns the circuit breaker of a configured destination, and nil
// for any other name. Operators' tools read its state and may Reset it.
func (r *Relay) Breaker(destination string) *circuitbreaker.CircuitBreaker {
	if d, ok := r.dests[destination]; ok {
		return d.breaker
	}
	return nil
}

// LastRound returns when the relay's claim loop last finished a round (a
// call to the store that claims and renews leases, answered or failed,
// and the wait after it), by the relay's clock: the time Run started
// before the first, the zero time before Run. Each of a round's store
// calls is bounded (30 s), and its wait by MaxPollInterval, so a loop
// that has not finished one for many minutes is wedged: a store driver
// that ignores its context, a deadlock. A store that is down does not
// stop the rounds; they fail and go on.
//
// On the real clock the time keeps its monotonic reading, so that
// time.Since(LastRound()) is the time since the round whatever the wall
// clock did meanwhile: kept as Unix nanoseconds, a wall clock stepped ten
// minutes forward (NTP after a VM resumed) made a healthy loop look wedged
// to serve's /healthz until its next round, and one stepped back hid a
// wedged loop for as long as the step.
func (r *Relay) LastRound() time.Time {
	if t := r.lastRound.Load(); t != nil {
		return *t
	}
	return time.Time{}
}

// roundDone notes that the loop finished a round now.
func (r *Relay) roundDone() {
	now := r.clk.Now()
	r.lastRound.Store(&now)
}

// Run delivers messages until ctx is done, then shuts down gracefully: it
// stops claiming, gives back the messages it has not started, waits up to
// ShutdownTimeout for deliveries in progress (cancelling their contexts at
// the deadline), and records every outcome in one last store call. It
// returns nil after a clean shutdown, and an error saying what was left
// undone otherwise. A Relay runs once; a second call returns ErrAlreadyRun.
func (r *Relay) Run(ctx context.Context) error {
	if !r.started.CompareAndSwap(false, true) {
		return ErrAlreadyRun
	}
	r.startDeliveries(ctx)
	defer r.cancelDeliveries()
	stopCtx, cancelStop := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelStop()
	defer context.AfterFunc(ctx, func() { time.AfterFunc(r.cfg.ShutdownTimeout, cancelStop) })()
	r.stopCtx = stopCtx
	r.roundDone()
	for range r.cfg.Workers {
		r.workers.Add(1)
		go r.work()
	}
	r.log.LogAttrs(ctx, slog.LevelInfo, "relay started",
		slog.String("instance", r.cfg.Instance.ID), slog.Int("workers", r.cfg.Workers),
		slog.Int("destinations", len(r.dests)))
	if r.fleet != nil {
		r.beat(stopCtx) // heart-beat before the first claim
	}
	stopMaint, maintDone := make(chan struct{}), make(chan struct{})
	go r.maintain(stopMaint, maintDone)
	defer func() { close(stopMaint); <-maintDone }()
	stopRecorder, recorderDone := make(chan struct{}), make(chan struct{})
	go r.runRecorder(stopRecorder, recorderDone)
	stopWatch := make(chan struct{})
	defer close(stopWatch)
	go r.watchStalls(stopWatch)
	l := newLoop(r)
	l.run(ctx, r.subscribe(ctx))
	l.setWaiting(stopCtx, false)
	err := l.shutdown(stopRecorder, recorderDone)
	r.log.LogAttrs(context.Background(), slog.LevelInfo, "relay stopped",
		slog.String("instance", r.cfg.Instance.ID))
	return err
}

// subscribe returns the store's wake-up channel when it has one, else nil.
func (r *Relay) subscribe(ctx context.Context) <-chan struct{} {
	n, ok := r.store.(store.Notifier)
	if !ok {
		return nil
	}
	ch, err := n.Subscribe(ctx)
	if err != nil {
		r.log.LogAttrs(ctx, slog.LevelWarn, "store notifications unavailable; polling only",
			slog.String("error", err.Error()))
		return nil
	}
	return ch
}

// report hands outcomes to the recorder and wakes it.
func (r *Relay) report(outs ...outcome) {
	if len(outs) == 0 {
		return
	}
	// The flights are now the recorder's to settle: a renewal the store
	// refuses meanwhile is not a lost lease, a claim that returns one
	// gives its new lease back once it is recorded, and an abandoned
	// shutdown does not release it a second time.
	r.hand(&r.outcomes, outs)
	select {
	case r.recordCh <- struct{}{}:
	default:
	}
}

// giveBack hands back leases that claims took on messages the relay
// already had (causeReclaimed). They are not the recorder's: they go with
// the loop's next store call, whose claim runs after them in the same
// transaction. A claim that returns one of them therefore took it after
// the release, with a lease of the relay's own to deliver under. Recorded
// on their own, a claim overlapping the record could take the message
// back either way, after the release or before it (a lapsed lease the
// release then cleared); the relay could not tell which, so it gave the
// lease back once more, for the next overlapping claim to take: a
// livelock, seen under load on SQLite, of hundreds of give-backs and no
// delivery. Once stopping, the loop claims no more and they go to the
// recorder.
func (r *Relay) giveBack(outs ...outcome) {
	if len(outs) == 0 {
		return
	}
	if r.stopping.Load() {
		r.report(outs...)
		return
	}
	r.hand(&r.givenBack, outs)
	r.wake()
}

// hand marks the flights of outs reported and queues outs on q (a queue
// of r.mu's).
func (r *Relay) hand(q *[]outcome, outs []outcome) {
	r.fl.mu.Lock()
	for i := range outs {
		if f, ok := r.fl.m[outs[i].m.ID]; ok {
			f.reported = true
		}
	}
	r.fl.mu.Unlock()
	r.mu.Lock()
	*q = append(*q, outs...)
	r.mu.Unlock()
}

// takeGivenBack returns and removes the leases waiting to be given back.
func (r *Relay) takeGivenBack() []outcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	outs := r.givenBack
	r.givenBack = nil
	return outs
}

// putBack returns outcomes the recorder could not record to the front of
// the queue.
func (r *Relay) putBack(outs []outcome) {
	r.mu.Lock()
	r.outcomes = append(outs, r.outcomes...)
	r.mu.Unlock()
}

// wake makes the loop run a round soon; wake-ups coalesce.
func (r *Relay) wake() {
	select {
	case r.wakeCh <- struct{}{}:
	default:
	}
}

// takeOutcomes returns and removes up to n reported outcomes, the
// earliest first; n <= 0 takes all.
func (r *Relay) takeOutcomes(n int) []outcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n <= 0 || n >= len(r.outcomes) {
		outs := r.outcomes
		r.outcomes = nil
		return outs
	}
	outs := append([]outcome(nil), r.outcomes[:n]...)
	r.outcomes = append(r.outcomes[:0:0], r.outcomes[n:]...)
	return outs
}

// pendingOutcomes reports whether outcomes wait for the loop.
func (r *Relay) pendingOutcomes() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.outcomes) > 0 || len(r.givenBack) > 0
}

// startDeliveries makes the parent of every delivery's context, not done
// with ctx (shutdown lets deliveries finish), and cancelDeliveries, which
// ends it and notes when.
func (r *Relay) startDeliveries(ctx context.Context) {
	deliverCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.deliverCtx = deliverCtx
	r.cancelDeliveries = func() {
		now := time.Now()
		r.deliveriesEnded.CompareAndSwap(nil, &now)
		cancel()
	}
}
