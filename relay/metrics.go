package relay

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstophq/backstop/circuitbreaker"
	"github.com/backstophq/backstop/dlq"
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
//	                                                  destination_fault, breaker_open, cascade or shutdown
//	dead_lettered_total{destination,reason} counter   messages moved to the dead-letter queue
//	in_flight                              gauge      messages claimed and not yet recorded
//	breaker_state{destination}             gauge      0 closed, 1 half-open (a probe is due or in flight), 2 open
//	destination_paused{destination}        gauge      1 while a Retry-After pause holds the destination
//	unknown_destination_messages{destination}
//	                                       gauge      messages waiting for a destination this relay does not
//	                                                  know (store.Fleet stores; counted every 4th heart-beat)
//	leader                                 gauge      1 while this instance leads the fleet's maintenance
//	dlq_depth                              gauge      dead-letter entries (store.DLQ().Count)
//	dlq_oldest_age_seconds                 gauge      age of the oldest pending dead letter
//	scheduled_backlog                      gauge      messages waiting for a later try
//	poison_candidates                      gauge      failed messages still retrying with at least
//	                                                  half the default policy's MaxAttempts
//	blocked_streams                        gauge      strict streams held back by a message waiting for
//	                                                  its retry or dead-lettered (store.BlockedStreams)
//	claim_duration_seconds                 histogram  one store round trip (ProcessBatch)
//	delivery_duration_seconds{destination} histogram  one delivery attempt, in-process retries included
//	end_to_end_seconds{destination}        histogram  from a message's CreatedAt to its delivery
//
// The store gauges are read on scrape, at most once per monitorEvery and
// each query bounded by monitorTimeout, so that frequent scrapes cost the
// database nothing more.
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
// the store's monitoring queries.
type monitor struct {
	r                                                       *Relay
	inFlight, breaker, depth, oldest, backlog, poi, blocked *prometheus.Desc
	paused, unknown, leader                                 *prometheus.Desc

	mu   sync.Mutex
	at   time.Time
	snap monitorSnapshot
}

// monitorSnapshot holds the store gauges; a field is nil when its query
// failed.
type monitorSnapshot struct {
	depth, oldest, backlog, poison, blocked *float64
}

func newMonitor(r *Relay) *monitor {
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help, labels, nil)
	}
	return &monitor{
		r:        r,
		inFlight: desc("in_flight", "Messages claimed and not yet recorded."),
		breaker:  desc("breaker_state", "Circuit breaker state: 0 closed, 1 half-open, 2 open.", "destination"),
		depth:    desc("dlq_depth", "Entries in the dead-letter queue."),
		oldest:   desc("dlq_oldest_age_seconds", "Age of the oldest pending dead letter."),
		backlog:  desc("scheduled_backlog", "Messages waiting for a later try."),
		poi:      desc("poison_candidates", "Failed messages still retrying with many attempts."),
		blocked:  desc("blocked_streams", "Strict streams held back by a message waiting for its retry or dead-lettered."),
		paused:   desc("destination_paused", "1 while a Retry-After pause holds the destination.", "destination"),
		unknown:  desc("unknown_destination_messages", "Messages waiting for a destination this relay does not know.", "destination"),
		leader:   desc("leader", "1 while this instance leads the fleet's maintenance."),
	}
}

// Describe sends the gauges' descriptors.
func (c *monitor) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.inFlight, c.breaker, c.depth, c.oldest, c.backlog, c.poi, c.blocked, c.paused, c.unknown, c.leader} {
		ch <- d
	}
}

// Collect sends the gauges' values, querying the store when the last
// reading is older than monitorEvery.
func (c *monitor) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(c.inFlight, float64(c.r.stats.inFlight.Load()))
	now := c.r.clk.Now()
	for _, d := range c.r.destList {
		gauge(c.breaker, breakerValue(d.state(now)), d.name)
		paused := 0.0
		if now.Before(d.pausedUntil()) {
			paused = 1
		}
		gauge(c.paused, paused, d.name)
	}
	for d, n := range c.r.unknownPending() {
		gauge(c.unknown, float64(n), d)
	}
	leader := 0.0
	if c.r.maint.leader.Load() {
		leader = 1
	}
	gauge(c.leader, leader)
	snap := c.snapshot()
	for _, g := range []struct {
		d *prometheus.Desc
		v *float64
	}{{c.depth, snap.depth}, {c.oldest, snap.oldest}, {c.backlog, snap.backlog}, {c.poi, snap.poison}, {c.blocked, snap.blocked}} {
		if g.v != nil {
			gauge(g.d, *g.v)
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

// snapshot returns the store gauges, refreshed when stale.
func (c *monitor) snapshot() monitorSnapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.r.clk.Now()
	if !c.at.IsZero() && now.Sub(c.at) < monitorEvery {
		return c.snap
	}
	c.at = now
	ctx, cancel := context.WithTimeout(context.Background(), monitorTimeout)
	defer cancel()
	s := c.r.store
	var snap monitorSnapshot
	if n, err := s.DLQ().Count(ctx); err == nil {
		snap.depth = ptr(float64(n))
	}
	if es, err := s.DLQ().List(ctx, &dlq.Filters{Status: dlq.StatusPending, Limit: 1}); err == nil {
		age := 0.0
		if len(es) > 0 {
			age = max(now.Sub(es[0].FailureTime).Seconds(), 0)
		}
		snap.oldest = ptr(age)
	}
	if b, err := s.ScheduledBacklog(ctx); err == nil {
		snap.backlog = ptr(float64(b.Count))
	}
	if ms, err := s.PoisonCandidates(ctx, max(c.r.cfg.Store.DefaultPolicy.MaxAttempts/2, 1)); err == nil {
		snap.poison = ptr(float64(len(ms)))
	}
	if n, err := s.BlockedStreams(ctx); err == nil {
		snap.blocked = ptr(float64(n))
	}
	c.snap = snap
	return snap
}

func ptr(v float64) *float64 { return &v }
