package store

import (
	"context"
	"time"
)

// Gauger is implemented by stores that read the store-wide gauges a
// monitor exports in one cheap call: count queries over indexes, never a
// payload or headers. Both stores implement it; a relay falls back on the
// Monitoring queries and DLQ().Count for a store that does not.
type Gauger interface {
	// Gauges reads the store-wide gauges at the store's now. Each count
	// agrees with the method that defines it: DLQPending with
	// DLQ().Count, Scheduled with ScheduledBacklog().Count,
	// PoisonCandidates with len(PoisonCandidates(poisonMinAttempts)) up
	// to MaxPoisonCandidates (the gauge counts past it),
	// BlockedStreams with BlockedStreams.
	Gauges(ctx context.Context, poisonMinAttempts int) (Gauges, error)
}

// Gauges are the store-wide gauges, read together.
type Gauges struct {
	// DLQPending counts the pending dead-letter entries: the queue's
	// depth (DLQ().Count).
	DLQPending int
	// OldestDLQ is the failure time of the oldest pending dead-letter
	// entry; zero when none is pending.
	OldestDLQ time.Time
	// Scheduled counts the undelivered, not dead-lettered messages due
	// after now (ScheduledBacklog().Count).
	Scheduled int
	// PoisonCandidates counts the undelivered, not dead-lettered failed
	// messages with at least the given attempts (PoisonCandidates).
	PoisonCandidates int
	// BlockedStreams counts the strict streams held back by a message
	// waiting for its retry or dead-lettered (BlockedStreams).
	BlockedStreams int
	// Leased counts the undelivered messages under an unexpired lease:
	// what the fleet has in flight (MessageFilter's StateLeased).
	Leased int
}
