package backstopsys

import (
	"fmt"
	"time"

	"github.com/backstophq/backstop/relay"
	"github.com/backstophq/backstop/retry"
)

// The settings of the "backstop-tuned" variant: not what users run, but
// what the relay can do with its knobs turned for throughput and for a
// handler whose failures are short blips. The store's Config stays zero.
const (
	tunedWorkers      = 128
	tunedBatchSize    = 1024
	tunedPollInterval = relay.MinPollInterval
	tunedMaxPoll      = 100 * time.Millisecond
	tunedRetryTries   = 3
	tunedRetryDelay   = 5 * time.Millisecond
)

// TunedSettings describes the tuned variant for the report.
var TunedSettings = fmt.Sprintf("relay.Config{Workers: %d, BatchSize: %d, PollInterval: %v, MaxPollInterval: %v}, "+
	"destination InProcess retry.NewConfig(%d, linear %v apart); store.Config zero",
	tunedWorkers, tunedBatchSize, tunedPollInterval, tunedMaxPoll, tunedRetryTries, tunedRetryDelay)

// tune returns cfg with the tuned settings.
func tune(cfg relay.Config) relay.Config {
	cfg.Workers = tunedWorkers
	cfg.BatchSize = tunedBatchSize
	cfg.PollInterval = tunedPollInterval
	cfg.MaxPollInterval = tunedMaxPoll
	for name, d := range cfg.Destinations {
		d.InProcess = retry.NewConfig(tunedRetryTries, retry.NewLinearBackoff(tunedRetryDelay, tunedRetryDelay, 0, false))
		cfg.Destinations[name] = d
	}
	return cfg
}
