package retry_test

import (
	"math"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop/retry"
)

// constant returns a random source that always yields r.
func constant(r float64) retry.Option {
	return retry.WithRandom(func() float64 { return r })
}

// want checks s.Delay(n) against a table of n → delay.
func want(t *testing.T, s retry.Strategy, table map[int]time.Duration) {
	t.Helper()
	for n, d := range table {
		if got := s.Delay(n); got != d {
			t.Errorf("Delay(%d) = %v, want %v", n, got, d)
		}
	}
}

const maxDuration = time.Duration(math.MaxInt64)

func TestExponentialBackoffTable(t *testing.T) {
	t.Parallel()
	s := retry.NewExponentialBackoff(time.Second, time.Minute, false)
	want(t, s, map[int]time.Duration{
		-5: time.Second, 0: time.Second,
		1: 1 * time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second,
		5: 16 * time.Second, 6: 32 * time.Second, 7: time.Minute, 8: time.Minute,
		1000: time.Minute, math.MaxInt: time.Minute,
	})
}

func TestExponentialBackoffMultiplier(t *testing.T) {
	t.Parallel()
	want(t, retry.NewExponentialBackoff(time.Second, time.Hour, false, retry.WithMultiplier(1.5)), map[int]time.Duration{
		1: time.Second, 2: 1500 * time.Millisecond, 3: 2250 * time.Millisecond, 4: 3375 * time.Millisecond,
	})
	want(t, retry.NewExponentialBackoff(time.Second, time.Hour, false, retry.WithMultiplier(3)), map[int]time.Duration{
		1: time.Second, 2: 3 * time.Second, 3: 9 * time.Second, 4: 27 * time.Second, 9: time.Hour,
	})
	// Below 1 (and NaN) means constant.
	for _, f := range []float64{0.5, 0, -2, math.NaN()} {
		want(t, retry.NewExponentialBackoff(time.Second, time.Hour, false, retry.WithMultiplier(f)), map[int]time.Duration{
			1: time.Second, 2: time.Second, 1000: time.Second,
		})
	}
	// An infinite multiplier saturates at the cap.
	want(t, retry.NewExponentialBackoff(time.Second, time.Hour, false, retry.WithMultiplier(math.Inf(1))), map[int]time.Duration{
		1: time.Second, 2: time.Hour,
	})
}

func TestExponentialBackoffEdges(t *testing.T) {
	t.Parallel()
	// No cap: saturates at the longest Duration instead of overflowing.
	want(t, retry.NewExponentialBackoff(time.Nanosecond, 0, false), map[int]time.Duration{
		1: 1, 63: 1 << 62, 64: maxDuration, 1000: maxDuration, math.MaxInt: maxDuration,
	})
	want(t, retry.NewExponentialBackoff(time.Second, -1, true, constant(0.999999)), map[int]time.Duration{
		1000: maxDuration,
	})
	// Base above the cap.
	want(t, retry.NewExponentialBackoff(2*time.Minute, time.Minute, false), map[int]time.Duration{1: time.Minute, 5: time.Minute})
	// Zero and negative base.
	want(t, retry.NewExponentialBackoff(0, time.Minute, true, constant(0.9)), map[int]time.Duration{1: 0, 1000: 0})
	want(t, retry.NewExponentialBackoff(-time.Second, time.Minute, false), map[int]time.Duration{1: 0})
	// The zero value is usable.
	want(t, &retry.ExponentialBackoff{}, map[int]time.Duration{1: 0, 9: 0})
}

func TestExponentialBackoffJitter(t *testing.T) {
	t.Parallel()
	base, max := time.Second, time.Minute
	// Lowest draw: 75 %.
	want(t, retry.NewExponentialBackoff(base, max, true, constant(0)), map[int]time.Duration{
		1: 750 * time.Millisecond, 2: 1500 * time.Millisecond, 3: 3 * time.Second,
		6: 24 * time.Second, 7: 45 * time.Second, 1000: 45 * time.Second,
	})
	// Middle draw: the nominal delay.
	want(t, retry.NewExponentialBackoff(base, max, true, constant(0.5)), map[int]time.Duration{
		1: time.Second, 2: 2 * time.Second, 7: time.Minute,
	})
	// Highest draw: just under 125 %, capped at max after jitter.
	want(t, retry.NewExponentialBackoff(base, max, true, constant(0.999999)), map[int]time.Duration{
		1: 1249999500 * time.Nanosecond, 6: 39999984 * time.Microsecond, 7: time.Minute, 1000: time.Minute,
	})
	// Full jitter: uniform in [0, d].
	want(t, retry.NewExponentialBackoff(base, max, true, retry.WithFullJitter(), constant(0)), map[int]time.Duration{
		1: 0, 7: 0,
	})
	want(t, retry.NewExponentialBackoff(base, max, true, retry.WithFullJitter(), constant(0.25)), map[int]time.Duration{
		1: 250 * time.Millisecond, 3: time.Second, 7: 15 * time.Second,
	})
	// A custom fraction.
	want(t, retry.NewExponentialBackoff(base, max, true, retry.WithJitterFraction(0.5), constant(0)), map[int]time.Duration{
		1: 500 * time.Millisecond, 2: time.Second,
	})
	want(t, retry.NewExponentialBackoff(base, max, true, retry.WithJitterFraction(0.1), constant(0.75)), map[int]time.Duration{
		1: 1050 * time.Millisecond,
	})
	// Jitter off: the options have no effect.
	want(t, retry.NewExponentialBackoff(base, max, false, retry.WithFullJitter(), constant(0)), map[int]time.Duration{
		1: time.Second, 7: time.Minute,
	})
}

func TestJitterOptionsClamp(t *testing.T) {
	t.Parallel()
	s := func(opts ...retry.Option) retry.Strategy { return retry.NewFixedDelay(time.Second, true, opts...) }
	for name, c := range map[string]struct {
		s    retry.Strategy
		want time.Duration
	}{
		"random below 0":           {s(constant(-1)), 750 * time.Millisecond},
		"random NaN":               {s(constant(math.NaN())), 750 * time.Millisecond},
		"random 1":                 {s(constant(1)), 1250 * time.Millisecond},
		"random above 1":           {s(constant(7)), 1250 * time.Millisecond},
		"fraction 0":               {s(retry.WithJitterFraction(0), constant(0)), time.Second},
		"fraction negative":        {s(retry.WithJitterFraction(-1), constant(0)), time.Second},
		"fraction NaN":             {s(retry.WithJitterFraction(math.NaN()), constant(0)), time.Second},
		"fraction above 1":         {s(retry.WithJitterFraction(3), constant(0)), 0},
		"fraction undoes full":     {s(retry.WithFullJitter(), retry.WithJitterFraction(0.25), constant(0)), 750 * time.Millisecond},
		"full undoes fraction":     {s(retry.WithJitterFraction(0.25), retry.WithFullJitter(), constant(0.5)), 500 * time.Millisecond},
		"nil option ignored":       {s(nil, constant(0)), 750 * time.Millisecond},
		"nil random is default":    {s(retry.WithRandom(nil), retry.WithJitterFraction(0)), time.Second},
		"last WithRandom wins":     {s(constant(0), constant(0.5)), time.Second},
		"full jitter highest draw": {s(retry.WithFullJitter(), constant(0.999999)), 999999 * time.Microsecond},
	} {
		if got := c.s.Delay(1); got != c.want {
			t.Errorf("%s: Delay(1) = %v, want %v", name, got, c.want)
		}
	}
}

func TestDefaultRandomStaysInBounds(t *testing.T) {
	t.Parallel()
	s := retry.DefaultExponentialBackoff()
	var wg sync.WaitGroup
	seen := make([]map[time.Duration]bool, 8)
	for g := range seen {
		seen[g] = map[time.Duration]bool{}
		wg.Go(func() {
			for range 500 {
				seen[g][s.Delay(1)] = true
				if d := s.Delay(7); d < 45*time.Second || d > time.Minute {
					t.Errorf("Delay(7) = %v, outside [45s, 1m]", d)
				}
			}
		})
	}
	wg.Wait()
	for _, m := range seen {
		for d := range m {
			if d < 750*time.Millisecond || d > 1250*time.Millisecond {
				t.Errorf("Delay(1) = %v, outside [0.75s, 1.25s]", d)
			}
		}
		if len(m) < 2 {
			t.Errorf("default jitter gave %d distinct delays in 500 draws", len(m))
		}
	}
}
