package relay

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstophq/backstop/circuitbreaker"
	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/store"
)

// The relay's Prometheus metrics, registered on Config.Metrics, all in
// the namespace "backstop":
//
//	claimed_total                          counter    messages claimed
//	delivered_total{destination}           counter    messages delivered
//	failed_total{destination,reason,class,blame}
//	                                       counter    failed attempts charged to messages
//	retries_total{destination}             counter    in-process retries
//	released_total{destination,cause}      counter    messages given back uncharged; cause is
//	                                                  destination_fault, breaker_open, cascade, shutdown, or
//	                                                  elsewhere (left to another instance: transport.Elsewhere)
//	dead_lettered_total{destination,reason} counter   messages moved to the dead-letter queue
//	in_flight                              gauge      messages claimed and not yet recorded
//	breaker_state{destination}             gauge      0 closed, 1 half-open (a probe is due or in flight), 2 open
//	destination_paused{destination}        gauge      1 while a Retry-After pause holds the destination
//	queued{destination}                    gauge      messages this relay holds leased for the destination,
//	                                                  waiting for a worker or, under a RateLimit, a token
//	rate_limited{destination}              gauge      1 while the destination's RateLimit holds back a message
//	                                                  ready to start (destinations with a RateLimit only)
//	unknown_destination_messages{destination}
//	                                       gauge      messages waiting for a destination this relay does not
//	                                                  know (store.Fleet stores; counted every 4th heart-beat;
//	                                                  the maxUnknownSeries largest, the rest as "(others)")
//	leader                                 gauge      1 while this instance leads the fleet's maintenance
//
// The destination label of the counters is a configured destination's
// name, or "(unknown)" for a message whose destination the relay does not
// know: such names come from rows anyone may write, and each would be a
// series for ever (an invalid UTF-8 one made the client library panic).
//
// The store-wide gauges, exported by one instance of a fleet (see below):
//
//	dlq_depth                              gauge      pending dead-letter entries (store.DLQ().Count)
//	dlq_oldest_age_seconds                 gauge      age of the oldest pending dead letter (0 when none)
//	scheduled_backlog                      gauge      messages waiting for a later try
//	poison_candidates                      gauge      failed messages still retrying with at least
//	                                                  half the default policy's MaxAttempts
//	blocked_streams                        gauge      strict streams held back by a message waiting for
//	                                                  its retry or dead-lettered (store.BlockedStreams)
//	leased_messages                        gauge      messages under an unexpired lease, whichever
//	                                                  instance holds them (store.Gauger stores only)
//
// and the histograms:
//
//	claim_duration_seconds                 histogram  one store round trip (ProcessBatch)
//	delivery_duration_seconds{destination} histogram  one delivery attempt, in-process retries included
//	end_to_end_seconds{destination}        histogram  from a message's CreatedAt to its delivery
//
// The store-wide gauges describe the whole store, not one instance, and a
// scrape never queries the store for them: it reads the last reading,
// under a mutex only, so a slow database never holds a scrape up. With a
// store.Fleet store only the leader reads them, on its maintenance beat
// and at most once per monitorEvery, each reading bounded by
// monitorTimeout, and only the leader exports them: the other instances
// leave them out, so that a sum over the fleet counts the store once (a
// max gives the same). For a moment after a failover
// no instance exports them, until the new leader's first reading. Without
// a fleet (a store that is not a store.Fleet, or NoFleet) each relay
// reads them every monitorEvery while it runs. A store that implements
// store.Gauger answers them in one count query; another is asked through
// its Monitoring queries and DLQ().Count (leased_messages is then left
// out). A gauge whose reading failed keeps its last value for up to
// gaugesHeldFor (a minute), then is left out until a reading succeeds.
const namespace = "backstop"

const (
	monitorEvery   = 10 * time.Second
	monitorTimeout = 5 * time.Second
)

type metrics struct {
	claimed          prometheus.Counter
	delivered        *prometheus.CounterVec
	failed           *prometheus.CounterVec
	retries          *prometheus.CounterVec
	released         *prometheus.CounterVec
	deadLettered     *prometheus.CounterVec
	claimDuration    prometheus.Histogram
	deliveryDuration *prometheus.HistogramVec
	endToEnd         *prometheus.HistogramVec
}

// destMetrics are one destination's children, looked up once.
type destMetrics struct {
	delivered prometheus.Counter
	retries   prometheus.Counter
	duration  prometheus.Observer
	endToEnd  prometheus.Observer
}

func newMetrics() *metrics {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, labels)
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: name, Help: help, Buckets: buckets}, labels)
	}
	return &metrics{
		claimed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "claimed_total",
			Help: "Messages claimed by the relay."}),
		delivered:    counter("delivered_total", "Messages delivered and marked published.", "destination"),
		failed:       counter("failed_total", "Failed delivery attempts charged to messages.", "destination", "reason", "class", "blame"),
		retries:      counter("retries_total", "In-process retries inside delivery attempts.", "destination"),
		released:     counter("released_total", "Messages given back without charging an attempt.", "destination", "cause"),
		deadLettered: counter("dead_lettered_total", "Messages moved to the dead-letter queue.", "destination", "reason"),
		claimDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Name: "claim_duration_seconds",
			Help: "Duration of one store round trip (record, renew, claim).", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		deliveryDuration: histogram("delivery_duration_seconds", "Duration of one delivery attempt, in-process retries included.",
			prometheus.ExponentialBuckets(0.001, 2.5, 12), "destination"),
		endToEnd: histogram("end_to_end_seconds", "Time from a message's creation to its delivery.",
			prometheus.ExponentialBuckets(0.01, 4, 12), "destination"),
	}
}

func (m *metrics) forDestination(name string) destMetrics {
	return destMetrics{
		delivered: m.delivered.WithLabelValues(name),
		retries:   m.retries.WithLabelValues(name),
		duration:  m.deliveryDuration.WithLabelValues(name),
		endToEnd:  m.endToEnd.WithLabelValues(name),
	}
}

// register registers every collector on reg, with the store gauges of r.
func (m *metrics) register(reg prometheus.Registerer, r *Relay) error {
	for _, c := range []prometheus.Collector{
		m.claimed, m.delivered, m.failed, m.retries, m.released, m.deadLettered,
		m.claimDuration, m.deliveryDuration, m.endToEnd, newMonitor(r),
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// monitor is the collector of the gauges read from the relay's state and
// from the last reading of the store gauges (storeGauges).
type monitor struct {
	r                                                       *Relay
	inFlight, breaker, depth, oldest, backlog, poi, blocked *prometheus.Desc
	paused, unknown, leader, leased, prefetch, overdue      *prometheus.Desc
	queued, rateLimited                                     *prometheus.Desc
}

func newMonitor(r *Relay) *monitor {
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help, labels, nil)
	}
	return &monitor{
		r:        r,
		inFlight: desc("in_flight", "Messages claimed and not yet recorded."),
		prefetch: desc("prefetch_target", "Messages the relay aims to hold leased: its BatchSize, grown towards MaxBatchSize while deliveries are fast."),
		overdue: desc("deliveries_overdue",
			"Deliveries still running 5 s past their destination's Timeout: a transport that ignores its context holds a worker until it returns."),
		breaker: desc("breaker_state", "Circuit breaker state: 0 closed, 1 half-open, 2 open.", "destination"),
		depth:   desc("dlq_depth", "Pending entries in the dead-letter queue (store-wide; exported by the fleet's leader)."),
		oldest:  desc("dlq_oldest_age_seconds", "Age of the oldest pending dead letter (store-wide; exported by the fleet's leader)."),
		backlog: desc("scheduled_backlog", "Messages waiting for a later try (store-wide; exported by the fleet's leader)."),
		poi:     desc("poison_candidates", "Failed messages still retrying with many attempts (store-wide; exported by the fleet's leader)."),
		blocked: desc("blocked_streams",
			"Strict streams held back by a message waiting for its retry or dead-lettered (store-wide; exported by the fleet's leader)."),
		leased: desc("leased_messages", "Messages under an unexpired lease (store-wide; exported by the fleet's leader)."),
		paused: desc("destination_paused", "1 while a Retry-After pause holds the destination.", "destination"),
		queued: desc("queued",
			"Messages this relay holds leased for the destination, waiting for a worker or, under a RateLimit, a token.", "destination"),
		rateLimited: desc("rate_limited",
			"1 while the destination's RateLimit holds back a message ready to start (destinations with a RateLimit only).", "destination"),
		unknown: desc("unknown_destination_messages", "Messages waiting for a destination this relay does not know.", "destination"),
		leader:  desc("leader", "1 while this instance leads the fleet's maintenance."),
	}
}

// Describe sends the gauges' descriptors.
func (c *monitor) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.inFlight, c.breaker, c.depth, c.oldest, c.backlog, c.poi, c.blocked, c.leased,
		c.paused, c.unknown, c.leader, c.prefetch, c.overdue, c.queued, c.rateLimited} {
		ch <- d
	}
}

// Collect sends the gauges' values. It never calls the store: the store
// gauges come from the last reading, when this relay exports them.
func (c *monitor) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(c.inFlight, float64(c.r.stats.inFlight.Load()))
	gauge(c.prefetch, float64(c.r.stats.prefetch.Load()))
	gauge(c.overdue, float64(c.r.stats.overdue.Load()))
	now := c.r.clk.Now()
	for _, d := range c.r.destList {
		gauge(c.breaker, breakerValue(d.state(now)), d.name)
		paused := 0.0
		if !d.pausedUntil(now).IsZero() {
			paused = 1
		}
		gauge(c.paused, paused, d.name)
	}
	for _, w := range c.r.sched.waiting() {
		gauge(c.queued, float64(w.queued), w.dest.name)
		if w.dest.limit != nil {
			v := 0.0
			if w.held {
				v = 1
			}
			gauge(c.rateLimited, v, w.dest.name)
		}
	}
	for d, n := range unknownSeries(c.r.unknownPending()) {
		gauge(c.unknown, float64(n), d)
	}
	leader := 0.0
	if c.r.maint.leader.Load() {
		leader = 1
	}
	gauge(c.leader, leader)
	snap, ok := c.r.storeGauges()
	if !ok {
		return
	}
	if snap.oldest != nil {
		age := 0.0
		if !snap.oldest.IsZero() {
			age = max(now.Sub(*snap.oldest).Seconds(), 0)
		}
		gauge(c.oldest, age)
	}
	for _, g := range []struct {
		d *prometheus.Desc
		v *int
	}{{c.depth, snap.depth}, {c.backlog, snap.backlog}, {c.poi, snap.poison}, {c.blocked, snap.blocked}, {c.leased, snap.leased}} {
		if g.v != nil {
			gauge(g.d, float64(*g.v))
		}
	}
}

func breakerValue(s circuitbreaker.State) float64 {
	switch s {
	case circuitbreaker.StateHalfOpen:
		return 1
	case circuitbreaker.StateOpen:
		return 2
	}
	return 0
}

// gaugeReading is a reading of the store gauges; a field is nil when its
// query failed (or, for leased, when the store is not a store.Gauger) and
// no earlier reading holds it (holdFrom). Each *At is when its value was
// read.
type gaugeReading struct {
	depth, backlog, poison, blocked, leased                     *int
	depthAt, backlogAt, poisonAt, blockedAt, leasedAt, oldestAt time.Time
	// oldest is the failure time of the oldest pending dead letter, zero
	// when none is pending.
	oldest *time.Time
}

// storeGauges is the last reading of the store gauges: written by the
// maintainer, read by scrapes, under mu only.
type storeGauges struct {
	mu   sync.Mutex
	held bool      // a reading is held
	at   time.Time // when it was taken, by the relay's clock
	snap gaugeReading
}

// storeGauges returns the last reading of the store gauges, and false
// when this relay does not export them: it holds no reading, or it is an
// instance of a fleet that does not lead it.
func (r *Relay) storeGauges() (gaugeReading, bool) {
	if r.fleet != nil && !r.maint.leader.Load() {
		return gaugeReading{}, false
	}
	g := &r.maint.gauges
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.snap, g.held
}

// gaugesFresh reports whether the last reading is less than monitorEvery
// old at now.
func (r *Relay) gaugesFresh(now time.Time) bool {
	g := &r.maint.gauges
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held && now.Sub(g.at) < monitorEvery
}

// forgetGauges drops the last reading: the relay stopped, or no longer
// leads its fleet.
func (r *Relay) forgetGauges() {
	g := &r.maint.gauges
	g.mu.Lock()
	g.held, g.snap = false, gaugeReading{}
	g.mu.Unlock()
}

// readGauges reads the store gauges, within monitorTimeout, and keeps the
// reading for the scrapes. The store is queried without holding the
// reading's mutex.
func (r *Relay) readGauges(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, monitorTimeout)
	defer cancel()
	at := r.clk.Now()
	snap, err := r.queryGauges(ctx)
	r.onRelayClock(ctx, &snap, at)
	snap.depthAt, snap.backlogAt, snap.poisonAt, snap.blockedAt, snap.leasedAt, snap.oldestAt = at, at, at, at, at, at
	if err != nil {
		r.log.LogAttrs(ctx, slog.LevelWarn, "reading the store gauges failed; the failed ones keep their last value for up to a minute, then are left out until a reading succeeds",
			slog.String("error", err.Error()))
	}
	g := &r.maint.gauges
	g.mu.Lock()
	if g.held {
		snap.holdFrom(g.snap, at, gaugesHeldFor)
	}
	g.held, g.at, g.snap = true, at, snap
	g.mu.Unlock()
}

// onRelayClock moves the oldest dead letter's failure time, a time on the
// store's clock (the database's on PostgreSQL), onto the relay's clock
// read at at, by the store's Now (store.Admin) read now: a scrape takes
// its age against the relay's clock. With the database an hour ahead of
// the relay, an entry two minutes old was 0 s old (a negative age,
// floored) until the relay's clock caught up the hour; an hour behind,
// it was an hour too old. When the store cannot say, the time is kept.
func (r *Relay) onRelayClock(ctx context.Context, snap *gaugeReading, at time.Time) {
	if snap.oldest == nil || snap.oldest.IsZero() {
		return
	}
	sc, ok := r.store.(interface {
		Now(ctx context.Context) (time.Time, error)
	})
	if !ok {
		return
	}
	storeNow, err := sc.Now(ctx)
	if err != nil {
		return
	}
	moved := snap.oldest.Add(at.Round(0).Sub(storeNow))
	snap.oldest = &moved
}

// gaugesHeldFor is how long a store gauge whose reading failed keeps its
// last value. A slow database made the 5 s reading time out now and then
// (27 times in 11 minutes on SQLite at a million rows): each time the
// gauges left /metrics until the next reading, and alerts on them flapped
// (absent() fired, a rate lost its samples). Past this a gauge whose
// readings keep failing is left out, as the operator must notice.
const gaugesHeldFor = time.Minute

// holdFrom gives each gauge of g whose reading failed its value in prev,
// read at most hold before now.
func (g *gaugeReading) holdFrom(prev gaugeReading, now time.Time, hold time.Duration) {
	for _, f := range []struct {
		v   **int
		p   *int
		pAt time.Time
		vAt *time.Time
	}{
		{&g.depth, prev.depth, prev.depthAt, &g.depthAt}, {&g.backlog, prev.backlog, prev.backlogAt, &g.backlogAt},
		{&g.poison, prev.poison, prev.poisonAt, &g.poisonAt}, {&g.blocked, prev.blocked, prev.blockedAt, &g.blockedAt},
		{&g.leased, prev.leased, prev.leasedAt, &g.leasedAt},
	} {
		if *f.v == nil && f.p != nil && now.Sub(f.pAt) < hold {
			*f.v, *f.vAt = f.p, f.pAt
		}
	}
	if g.oldest == nil && prev.oldest != nil && now.Sub(prev.oldestAt) < hold {
		g.oldest, g.oldestAt = prev.oldest, prev.oldestAt
	}
}

// queryGauges queries the store gauges: in one call when the store is a
// store.Gauger, else through its Monitoring queries and DLQ, each gauge on
// its own (one failing leaves the others).
func (r *Relay) queryGauges(ctx context.Context) (gaugeReading, error) {
	minAttempts := max(r.cfg.Store.DefaultPolicy.MaxAttempts/2, 1)
	if gr, ok := r.store.(store.Gauger); ok {
		g, err := gr.Gauges(ctx, minAttempts)
		if err != nil {
			return gaugeReading{}, err
		}
		return gaugeReading{depth: &g.DLQPending, backlog: &g.Scheduled, poison: &g.PoisonCandidates,
			blocked: &g.BlockedStreams, leased: &g.Leased, oldest: &g.OldestDLQ}, nil
	}
	s := r.store
	var (
		snap gaugeReading
		errs []error
	)
	keep := func(v int, err error) *int {
		if err != nil {
			errs = append(errs, err)
			return nil
		}
		return &v
	}
	snap.depth = keep(s.DLQ().Count(ctx))
	if es, err := s.DLQ().List(ctx, &dlq.Filters{Status: dlq.StatusPending, Limit: 1}); err != nil {
		errs = append(errs, err)
	} else {
		var oldest time.Time
		if len(es) > 0 {
			oldest = es[0].FailureTime
		}
		snap.oldest = &oldest
	}
	b, err := s.ScheduledBacklog(ctx)
	snap.backlog = keep(b.Count, err)
	ms, err := s.PoisonCandidates(ctx, minAttempts)
	snap.poison = keep(len(ms), err) // at most store.MaxPoisonCandidates: a store.Gauger counts them all
	snap.blocked = keep(s.BlockedStreams(ctx))
	return snap, errors.Join(errs...)
}

// unknownDestinationLabel is the destination label of the counters for
// messages whose destination the relay does not know (a destination
// configured under this name would share its series).
const unknownDestinationLabel = "(unknown)"

// maxUnknownSeries bounds the unknown_destination_messages series: the
// largest counts by name, the rest summed under "(others)".
const maxUnknownSeries = 20

// destLabel is the destination label of o's metrics.
func (o *outcome) destLabel() string {
	if o.dest != nil {
		return o.dest.name
	}
	return unknownDestinationLabel
}

// unknownSeries turns counts of messages by unknown destination into at
// most maxUnknownSeries+1 series whose names are valid UTF-8 (a name that
// is not would make the whole scrape fail).
func unknownSeries(counts map[string]int) map[string]int {
	names := make([]string, 0, len(counts))
	for d := range counts {
		names = append(names, d)
	}
	sort.Slice(names, func(i, j int) bool {
		if counts[names[i]] != counts[names[j]] {
			return counts[names[i]] > counts[names[j]]
		}
		return names[i] < names[j]
	})
	out := make(map[string]int, min(len(names), maxUnknownSeries+1))
	for i, d := range names {
		name := strings.ToValidUTF8(d, "\uFFFD")
		if i >= maxUnknownSeries {
			name = "(others)"
		}
		out[name] += counts[d]
	}
	return out
}
