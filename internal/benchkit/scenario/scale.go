package scenario

import (
	"fmt"
	"time"
)

// Scale sizes every scenario. Small is a smoke run for CI; Default gives
// the figures of BENCHMARKS.md; Large runs longer and adds the 1M drain on
// SQLite (River's SQLite driver writes and completes one row at a time,
// so preloading and draining 1M there takes it most of an hour).
type Scale struct {
	// Name is "small", "default" or "large".
	Name string
	// EnqueueFor is how long each enqueue case writes, with
	// EnqueueWriters goroutines each committing one transaction at a time.
	EnqueueFor     time.Duration
	EnqueueWriters int
	// Drain is the backlog of the drain scenario; DrainLarge that of
	// drain-large, which is skipped when 0. DrainLargeSQLite is
	// DrainLarge on SQLite.
	Drain, DrainLarge, DrainLargeSQLite int
	// DrainTimeout is how long a drain may take before the case gives up.
	DrainTimeout time.Duration
	// WorkFor is how long the insert-and-work scenarios insert, with
	// Inserters goroutines writing BatchRows rows a transaction.
	WorkFor   time.Duration
	Inserters int
	BatchRows int
	// Streams is the number of ordered streams of work-ordered, and
	// FailEvery the share of first attempts work-failing fails (1 in
	// FailEvery).
	Streams   int64
	FailEvery int64
	// VerifyFor is how long a timed case keeps working after its window
	// so that every message it wrote can be checked as handled.
	VerifyFor time.Duration
	// LatencyRate messages a second for LatencyFor, one a transaction.
	LatencyRate int
	LatencyFor  time.Duration
}

// Scales are the known scales by name.
var Scales = map[string]Scale{
	"small": {
		Name: "small", EnqueueFor: 200 * time.Millisecond, EnqueueWriters: 4,
		Drain: 500, DrainTimeout: 30 * time.Second,
		WorkFor: 250 * time.Millisecond, Inserters: 2, BatchRows: 100,
		Streams: 100, FailEvery: 20, VerifyFor: 300 * time.Millisecond,
		LatencyRate: 200, LatencyFor: 250 * time.Millisecond,
	},
	"default": {
		Name: "default", EnqueueFor: 10 * time.Second, EnqueueWriters: 4,
		Drain: 100_000, DrainLarge: 1_000_000, DrainTimeout: 15 * time.Minute,
		WorkFor: 20 * time.Second, Inserters: 2, BatchRows: 100,
		Streams: 10_000, FailEvery: 20, VerifyFor: 15 * time.Second,
		LatencyRate: 200, LatencyFor: 20 * time.Second,
	},
	"large": {
		Name: "large", EnqueueFor: 20 * time.Second, EnqueueWriters: 4,
		Drain: 100_000, DrainLarge: 1_000_000, DrainLargeSQLite: 1_000_000, DrainTimeout: 30 * time.Minute,
		WorkFor: 30 * time.Second, Inserters: 2, BatchRows: 100,
		Streams: 10_000, FailEvery: 20, VerifyFor: 60 * time.Second,
		LatencyRate: 200, LatencyFor: 60 * time.Second,
	},
}

// ScaleNamed returns the scale called name.
func ScaleNamed(name string) (Scale, error) {
	s, ok := Scales[name]
	if !ok {
		return Scale{}, fmt.Errorf("unknown scale %q (small, default, large)", name)
	}
	return s, nil
}

// DrainSize is the backlog of the drain scenario named name on store, 0
// when the scenario does not run at this scale.
func (s Scale) DrainSize(name, store string) int {
	switch {
	case name == Drain:
		return s.Drain
	case name == DrainLarge && store == SQLite:
		return s.DrainLargeSQLite
	case name == DrainLarge:
		return s.DrainLarge
	}
	return 0
}

// The scenarios, by name.
const (
	Enqueue1    = "enqueue-1"    // one row a transaction
	Enqueue100  = "enqueue-100"  // 100 rows a transaction
	Drain       = "drain"        // a preloaded backlog (Scale.Drain)
	DrainLarge  = "drain-large"  // a preloaded backlog (Scale.DrainLarge)
	Work        = "work"         // insert and work at once
	WorkOrdered = "work-ordered" // the same over Scale.Streams ordered streams
	WorkFailing = "work-failing" // the same with 1 in Scale.FailEvery first attempts failing
	Latency     = "latency"      // a light steady rate, enqueue to handler
)

// Names lists the scenarios in the order reports show them.
var Names = []string{Enqueue1, Enqueue100, Drain, DrainLarge, Work, WorkOrdered, WorkFailing, Latency}
