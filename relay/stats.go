package relay

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/backstophq/backstop/circuitbreaker"
)

// Stats is a snapshot of what a Relay has done since it was created, for
// summaries and progress displays. Delivered, Failed, Released and
// DeadLettered count outcomes once the store has recorded them; Retries
// and Rejected count as they happen.
type Stats struct {
	// Claimed is the number of messages claimed.
	Claimed int64
	// Delivered is the number of messages delivered and marked Published.
	Delivered int64
	// Failed is the number of failed attempts charged to messages,
	// including those that dead-lettered their message.
	Failed int64
	// Released is the number of messages given back without charging an
	// attempt: faults of the destination, breaker rejections, cascade
	// releases behind a failure, shutdown, and messages the transport left
	// to another instance (transport.Elsewhere).
	Released int64
	// DeadLettered is the number of messages moved to the dead-letter
	// queue.
	DeadLettered int64
	// Retries is the number of in-process retries made inside attempts.
	Retries int64
	// Rejected is the number of deliveries an open breaker refused.
	Rejected int64
	// LeasesLost is the number of messages whose lease the relay found it
	// no longer held while delivering them.
	LeasesLost int64
	// StoreErrors is the number of store calls that failed.
	StoreErrors int64
	// Batches is the number of store calls that succeeded.
	Batches int64
	// InFlight is the number of messages claimed and not yet recorded.
	InFlight int64
	// Prefetch is how many messages the relay aims to hold leased now:
	// BatchSize, grown towards MaxBatchSize while deliveries are fast.
	Prefetch int64
	// Reclaimed is the number of times a claim returned a message the
	// relay still held (its lease had lapsed); none was delivered twice.
	Reclaimed int64
	// Unrecorded is the number of outcomes the store refused to record
	// while it recorded others; their messages are tried again once their
	// leases lapse.
	Unrecorded int64
	// Stalls is the number of times the relay found it had been stalled
	// (paused past its timers).
	Stalls int64
	// Overdue is the number of deliveries that have not returned
	// overdueGrace (5 s) past their destination's Timeout, at the last
	// look (every renewal): a transport that ignores its context's
	// deadline holds a worker, and the message's lease, until it returns.
	Overdue int64
	// Leader says whether this instance leads the fleet's maintenance
	// (store.Fleet stores only).
	Leader bool
	// Swept is the number of delivered messages the relay swept as
	// leader.
	Swept int64
	// Vacuums is the number of store tables the relay vacuumed as leader
	// (store.Vacuumer stores only).
	Vacuums int64
	// UnknownPending counts the messages waiting for each destination
	// this relay does not know, at the last count (store.Fleet stores
	// only).
	UnknownPending map[string]int
	// Destinations holds the counts of each configured destination.
	Destinations map[string]DestinationStats
}

// DestinationStats are the counts of one destination.
type DestinationStats struct {
	// Delivered through Rejected are the destination's share of the
	// Stats counts of the same names.
	Delivered    int64
	Failed       int64
	Released     int64
	DeadLettered int64
	Retries      int64
	Rejected     int64
	// Breaker is the state of the destination's circuit breaker.
	Breaker circuitbreaker.State
	// BreakerTrips is how many times the circuit opened, counting each
	// failed probe as opening it again.
	BreakerTrips int64
	// PausedUntil is the end of a pause of the whole destination asked
	// for by a Retry-After hint; zero when it is not paused (by the
	// relay's clock).
	PausedUntil time.Time
	// InFlight is the number of the destination's messages this relay has
	// claimed and not yet recorded.
	InFlight int64
}

// counters are the relay-wide counts behind Stats.
type counters struct {
	claimed, delivered, failed, released, deadLettered  atomic.Int64
	retries, rejected, leasesLost, storeErrors, batches atomic.Int64
	inFlight, reclaimed, unrecorded, stalls, swept      atomic.Int64
	prefetch, overdue, vacuums                          atomic.Int64
}

// destCounters are a destination's counts behind DestinationStats.
type destCounters struct {
	delivered, failed, released, deadLettered, retries, rejected, trips atomic.Int64
}

// Stats returns a snapshot of the relay's counts.
func (r *Relay) Stats() Stats {
	now := r.clk.Now()
	s := Stats{
		Claimed:        r.stats.claimed.Load(),
		Delivered:      r.stats.delivered.Load(),
		Failed:         r.stats.failed.Load(),
		Released:       r.stats.released.Load(),
		DeadLettered:   r.stats.deadLettered.Load(),
		Retries:        r.stats.retries.Load(),
		Rejected:       r.stats.rejected.Load(),
		LeasesLost:     r.stats.leasesLost.Load(),
		StoreErrors:    r.stats.storeErrors.Load(),
		Batches:        r.stats.batches.Load(),
		InFlight:       r.stats.inFlight.Load(),
		Prefetch:       r.stats.prefetch.Load(),
		Overdue:        r.stats.overdue.Load(),
		Reclaimed:      r.stats.reclaimed.Load(),
		Unrecorded:     r.stats.unrecorded.Load(),
		Stalls:         r.stats.stalls.Load(),
		Leader:         r.maint.leader.Load(),
		Swept:          r.stats.swept.Load(),
		Vacuums:        r.stats.vacuums.Load(),
		UnknownPending: r.unknownPending(),
		Destinations:   make(map[string]DestinationStats, len(r.destList)),
	}
	flying := r.fl.perDestination()
	for _, d := range r.destList {
		s.Destinations[d.name] = DestinationStats{
			Delivered:    d.stats.delivered.Load(),
			Failed:       d.stats.failed.Load(),
			Released:     d.stats.released.Load(),
			DeadLettered: d.stats.deadLettered.Load(),
			Retries:      d.stats.retries.Load(),
			Rejected:     d.stats.rejected.Load(),
			Breaker:      d.state(now),
			PausedUntil:  d.pausedUntil(now),
			BreakerTrips: d.stats.trips.Load(),
			InFlight:     flying[d],
		}
	}
	return s
}

// signal publishes the number of a round of the loop: the last one after
// which it waited (Relay.turned), or after which it waited idle, with
// nothing in flight and nothing to record (Relay.idle). The package's tests
// wait on them instead of sleeping.
type signal struct {
	mu    sync.Mutex
	round uint64
	ch    chan struct{}
}

// set publishes round and wakes every waiter.
func (s *signal) set(round uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.round = round
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}

// wait blocks until a round after after has been published, or ctx ends.
func (s *signal) wait(ctx context.Context, after uint64) error {
	for {
		s.mu.Lock()
		if s.round > after {
			s.mu.Unlock()
			return nil
		}
		if s.ch == nil {
			s.ch = make(chan struct{})
		}
		ch := s.ch
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
