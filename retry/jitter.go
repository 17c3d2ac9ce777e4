package retry

import (
	"math"
	"math/rand/v2"
	"time"
)

// DefaultJitterFraction is the spread of the default jitter: a delay d
// becomes a uniform random duration in [d-25%, d+25%].
const DefaultJitterFraction = 0.25

// DefaultMultiplier is the growth factor of an ExponentialBackoff.
const DefaultMultiplier = 2.0

// maxDuration is the longest time.Duration; delays saturate at it.
const maxDuration = time.Duration(math.MaxInt64)

// Option adjusts a strategy built by NewExponentialBackoff,
// NewLinearBackoff or NewFixedDelay. Options that shape jitter have effect
// only when the constructor's jitter argument is true; when options
// contradict each other, the last one wins.
type Option func(*options)

type options struct {
	multiplier float64
	full       bool
	fraction   float64
	random     func() float64
}

func newOptions(opts []Option) options {
	o := options{multiplier: DefaultMultiplier, fraction: DefaultJitterFraction, random: rand.Float64}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}

// WithMultiplier sets the growth factor of an ExponentialBackoff (default
// DefaultMultiplier). A factor below 1, or NaN, is taken as 1: a constant
// delay. Other strategies ignore it.
func WithMultiplier(f float64) Option {
	return func(o *options) {
		if !(f >= 1) {
			f = 1
		}
		o.multiplier = f
	}
}

// WithFullJitter makes jitter draw each delay uniformly from [0, d] instead
// of d±25%. Full jitter spreads a crowd of retrying clients the most, at the
// cost of some retries coming almost at once.
func WithFullJitter() Option {
	return func(o *options) { o.full = true }
}

// WithJitterFraction makes jitter draw each delay uniformly from
// [d*(1-f), d*(1+f)] (default f = DefaultJitterFraction). f is clamped to
// [0, 1]; NaN counts as 0. It undoes an earlier WithFullJitter.
func WithJitterFraction(f float64) Option {
	return func(o *options) {
		switch {
		case !(f > 0):
			f = 0
		case f > 1:
			f = 1
		}
		o.full = false
		o.fraction = f
	}
}

// WithRandom sets the source of randomness for jitter: a function returning
// a number in [0, 1), such as math/rand/v2's Float64, which is the default.
// It is called once per jittered delay and must be safe for concurrent use
// when the strategy is shared. Values outside [0, 1) are clamped; nil
// restores the default. Tests inject a fixed sequence to get exact delays.
func WithRandom(random func() float64) Option {
	return func(o *options) {
		if random == nil {
			random = rand.Float64
		}
		o.random = random
	}
}

// jitter randomises delays. The zero value leaves them alone.
type jitter struct {
	on       bool
	full     bool
	fraction float64
	random   func() float64
}

func newJitter(on bool, o options) jitter {
	return jitter{on: on, full: o.full, fraction: o.fraction, random: o.random}
}

// apply returns d randomised: uniform in [0, d] with full jitter, else in
// [d*(1-fraction), d*(1+fraction)].
func (j jitter) apply(d time.Duration) time.Duration {
	if !j.on || d <= 0 || j.random == nil {
		return d
	}
	r := j.random()
	switch {
	case !(r >= 0):
		r = 0
	case r >= 1:
		r = math.Nextafter(1, 0)
	}
	if j.full {
		return scale(d, r)
	}
	return scale(d, 1-j.fraction+2*j.fraction*r)
}

// scale returns d*f rounded to the nanosecond, saturating at 0 and at
// maxDuration.
func scale(d time.Duration, f float64) time.Duration {
	x := math.Round(float64(d) * f)
	switch {
	case !(x > 0):
		return 0
	case x >= float64(maxDuration):
		return maxDuration
	}
	return time.Duration(x)
}

// limitOf returns the cap a max argument sets: max itself, or maxDuration
// when max <= 0 (no cap).
func limitOf(max time.Duration) time.Duration {
	if max <= 0 {
		return maxDuration
	}
	return max
}
