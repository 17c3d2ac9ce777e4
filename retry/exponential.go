package retry

import (
	"math"
	"time"
)

// ExponentialBackoff waits base * multiplier^(n-1) after the n-th failure,
// capped at max, optionally with jitter. It is the schedule of seed 002 and
// of the relay. It is immutable and safe for concurrent use.
//
// The cap applies both before and after jitter, so a delay never exceeds
// max: once the schedule reaches the cap, ±25% jitter draws from
// [0.75*max, max].
type ExponentialBackoff struct {
	base, limit time.Duration
	multiplier  float64
	jitter      jitter
}

// NewExponentialBackoff returns an exponential back-off starting at base and
// growing by DefaultMultiplier (or WithMultiplier) per failure up to max.
// A max <= 0 means no cap; a base <= 0 gives zero delays. With jitter, each
// delay is drawn uniformly from d±25% (WithJitterFraction, WithFullJitter)
// and then capped at max.
//
// For base 1s, max 1m:
//
//	n   delay  with jitter (±25%)
//	1   1s     [0.75s, 1.25s]
//	2   2s     [1.5s, 2.5s]
//	3   4s     [3s, 5s]
//	4   8s     [6s, 10s]
//	5   16s    [12s, 20s]
//	6   32s    [24s, 40s]
//	7   1m     [45s, 1m]  (64s capped)
//	8+  1m     [45s, 1m]
//
// Huge n is safe: the delay saturates at max without overflowing.
func NewExponentialBackoff(base, max time.Duration, jitter bool, opts ...Option) *ExponentialBackoff {
	o := newOptions(opts)
	return &ExponentialBackoff{
		base:       base,
		limit:      limitOf(max),
		multiplier: o.multiplier,
		jitter:     newJitter(jitter, o),
	}
}

// DefaultExponentialBackoff returns the back-off of DefaultConfig: base 1s,
// doubling, capped at 1 minute, with ±25% jitter. Without jitter its delays
// are 1s, 2s, 4s, 8s, 16s, 32s, then 1m for every later failure.
func DefaultExponentialBackoff() *ExponentialBackoff {
	return NewExponentialBackoff(time.Second, time.Minute, true)
}

// Delay returns the wait after the n-th failure; n < 1 counts as 1. It
// never returns Stop: bound the tries with Config.MaxAttempts.
func (b *ExponentialBackoff) Delay(n int) time.Duration {
	return min(b.jitter.apply(b.nominal(n)), b.limit)
}

// nominal returns the delay before jitter: base*multiplier^(n-1), capped.
func (b *ExponentialBackoff) nominal(n int) time.Duration {
	if b.base <= 0 {
		return 0
	}
	if b.base >= b.limit {
		return b.limit
	}
	if n < 1 {
		n = 1
	}
	x := float64(b.base) * math.Pow(b.multiplier, float64(n-1))
	if !(x < float64(b.limit)) { // also catches +Inf and NaN
		return b.limit
	}
	return min(time.Duration(math.Round(x)), b.limit)
}
