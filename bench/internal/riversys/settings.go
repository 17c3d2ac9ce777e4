package riversys

import (
	"log/slog"
	"time"

	"github.com/riverqueue/river"
)

// Settings are the River client settings a variant runs with.
type Settings struct {
	// Name labels the variant in reports.
	Name string
	// FetchCooldown and FetchPollInterval are river.Config's; zero means
	// River's defaults (100 ms and 1 s in v0.51).
	FetchCooldown, FetchPollInterval time.Duration
	// MaxWorkers is the default queue's river.QueueConfig.MaxWorkers.
	MaxWorkers int
	// InsertBatch is how many jobs one InsertMany call writes when a
	// backlog is preloaded.
	InsertBatch int
}

// BenchmarkSettings are those of River's own benchmark, `river bench`:
// cmd/river/riverbench/river_bench.go in github.com/riverqueue/river (read
// at commit fdf6cdf, the newest snapshot available here; cmd/river is not
// on the Go module proxy). Its client sets FetchCooldown 2 ms,
// FetchPollInterval 20 ms and MaxWorkers 2,000 on the default queue, and
// its inserter calls InsertMany with batches of 5,000 jobs.
var BenchmarkSettings = Settings{
	Name:              "river-bench",
	FetchCooldown:     2 * time.Millisecond,
	FetchPollInterval: 20 * time.Millisecond,
	MaxWorkers:        2000,
	InsertBatch:       5000,
}

// DefaultSettings are River's defaults. River has no default MaxWorkers
// (a queue must set it); 100 is the value of River's documentation
// (doc.go, "Starting a client"). Preloads use InsertMany batches of 5,000
// as in BenchmarkSettings: the preload is not timed.
var DefaultSettings = Settings{
	Name:        "river-default",
	MaxWorkers:  100,
	InsertBatch: 5000,
}

// config returns the river.Config of s.
func (s Settings) config(workers *river.Workers, logger *slog.Logger) *river.Config {
	return &river.Config{
		FetchCooldown:     s.FetchCooldown,
		FetchPollInterval: s.FetchPollInterval,
		Logger:            logger,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: s.MaxWorkers}},
		Workers:           workers,
	}
}
