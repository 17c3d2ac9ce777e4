package retry

import "time"

// LinearBackoff waits base + increment*n after the n-th failure, capped at
// max, optionally with jitter, as seed 002 defines it. It is immutable and
// safe for concurrent use. As with ExponentialBackoff, the cap applies after
// jitter too, so a delay never exceeds max.
type LinearBackoff struct {
	base, increment, limit time.Duration
	jitter                 jitter
}

// NewLinearBackoff returns a linear back-off. Negative base and increment
// count as 0; a max <= 0 means no cap. Note that the first delay (n = 1) is
// already base+increment. With jitter, each delay is drawn uniformly from
// d±25% (WithJitterFraction, WithFullJitter) and then capped at max.
//
// For base 1s, increment 5s, max 1m:
//
//	n    delay  with jitter (±25%)
//	1    6s     [4.5s, 7.5s]
//	2    11s    [8.25s, 13.75s]
//	3    16s    [12s, 20s]
//	10   51s    [38.25s, 1m]
//	11   56s    [42s, 1m]
//	12+  1m     [45s, 1m]  (61s capped)
//
// With base 0, increment 1s and max 3s it gives seed 001's in-process
// schedule 1s, 2s, 3s (see InProcessBackoff).
func NewLinearBackoff(base, max, increment time.Duration, jitter bool, opts ...Option) *LinearBackoff {
	o := newOptions(opts)
	return &LinearBackoff{
		base:      base,
		increment: increment,
		limit:     limitOf(max),
		jitter:    newJitter(jitter, o),
	}
}

// Delay returns the wait after the n-th failure; n < 1 counts as 1. It
// never returns Stop.
func (b *LinearBackoff) Delay(n int) time.Duration {
	return min(b.jitter.apply(b.nominal(n)), max(b.limit, 0))
}

// nominal returns base + increment*n, capped, without overflowing.
func (b *LinearBackoff) nominal(n int) time.Duration {
	base, inc, limit := max(b.base, 0), max(b.increment, 0), max(b.limit, 0)
	if base >= limit {
		return limit
	}
	if n < 1 {
		n = 1
	}
	if inc > 0 && int64(n) > int64((limit-base)/inc) {
		return limit
	}
	return base + inc*time.Duration(n)
}

// FixedDelay waits the same duration after every failure, optionally with
// jitter. It is immutable and safe for concurrent use.
type FixedDelay struct {
	delay  time.Duration
	jitter jitter
}

// NewFixedDelay returns a strategy that always waits d (a negative d counts
// as 0). With jitter, each delay is drawn uniformly from d±25%
// (WithJitterFraction, WithFullJitter); there is no cap, so a jittered delay
// may exceed d.
//
// For d = 10s:
//
//	n   delay  with jitter (±25%)  with full jitter
//	1+  10s    [7.5s, 12.5s]       [0s, 10s]
func NewFixedDelay(d time.Duration, jitter bool, opts ...Option) *FixedDelay {
	return &FixedDelay{delay: max(d, 0), jitter: newJitter(jitter, newOptions(opts))}
}

// Delay returns the fixed delay, jittered if so configured. It never
// returns Stop.
func (f *FixedDelay) Delay(int) time.Duration {
	return f.jitter.apply(f.delay)
}

// NoRetry is the strategy that never retries: the first failure is final.
type NoRetry struct{}

// NewNoRetry returns a strategy whose Delay always returns Stop.
func NewNoRetry() *NoRetry { return &NoRetry{} }

// Delay returns Stop.
func (*NoRetry) Delay(int) time.Duration { return Stop }
