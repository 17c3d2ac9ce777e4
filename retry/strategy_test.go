package retry_test

import (
	"math"
	"testing"
	"time"

	"github.com/backstophq/backstop/retry"
)

func TestLinearBackoffTable(t *testing.T) {
	t.Parallel()
	s := retry.NewLinearBackoff(time.Second, time.Minute, 5*time.Second, false)
	want(t, s, map[int]time.Duration{
		-1: 6 * time.Second, 0: 6 * time.Second,
		1: 6 * time.Second, 2: 11 * time.Second, 3: 16 * time.Second, 10: 51 * time.Second,
		11: 56 * time.Second, 12: time.Minute, 13: time.Minute, 1000: time.Minute, math.MaxInt: time.Minute,
	})
	// Jitter, capped after.
	want(t, retry.NewLinearBackoff(time.Second, time.Minute, 5*time.Second, true, constant(0)), map[int]time.Duration{
		1: 4500 * time.Millisecond, 2: 8250 * time.Millisecond, 12: 45 * time.Second,
	})
	want(t, retry.NewLinearBackoff(time.Second, time.Minute, 5*time.Second, true, constant(0.999999)), map[int]time.Duration{
		10: time.Minute, 1000: time.Minute,
	})
	want(t, retry.NewLinearBackoff(time.Second, time.Minute, 5*time.Second, true, retry.WithFullJitter(), constant(0.5)), map[int]time.Duration{
		1: 3 * time.Second, 12: 30 * time.Second,
	})
}

func TestLinearBackoffEdges(t *testing.T) {
	t.Parallel()
	// No cap: saturates.
	want(t, retry.NewLinearBackoff(time.Second, 0, time.Hour, false), map[int]time.Duration{
		1: time.Hour + time.Second, 1000: 1000*time.Hour + time.Second, math.MaxInt: maxDuration,
	})
	want(t, retry.NewLinearBackoff(maxDuration-1, 0, 2, false), map[int]time.Duration{1: maxDuration, 5: maxDuration})
	// Negative base and increment count as 0.
	want(t, retry.NewLinearBackoff(-time.Second, time.Minute, -time.Second, false), map[int]time.Duration{1: 0, 1000: 0})
	// No increment: constant base.
	want(t, retry.NewLinearBackoff(3*time.Second, time.Minute, 0, false), map[int]time.Duration{1: 3 * time.Second, math.MaxInt: 3 * time.Second})
	// Base above the cap.
	want(t, retry.NewLinearBackoff(2*time.Minute, time.Minute, time.Second, false), map[int]time.Duration{1: time.Minute})
	want(t, &retry.LinearBackoff{}, map[int]time.Duration{1: 0})
}

func TestFixedDelay(t *testing.T) {
	t.Parallel()
	want(t, retry.NewFixedDelay(10*time.Second, false), map[int]time.Duration{
		0: 10 * time.Second, 1: 10 * time.Second, 1000: 10 * time.Second, math.MaxInt: 10 * time.Second,
	})
	// Jitter is not capped: up to 125 %.
	want(t, retry.NewFixedDelay(10*time.Second, true, constant(0)), map[int]time.Duration{1: 7500 * time.Millisecond})
	want(t, retry.NewFixedDelay(10*time.Second, true, constant(1)), map[int]time.Duration{1: 12500 * time.Millisecond})
	want(t, retry.NewFixedDelay(10*time.Second, true, retry.WithFullJitter(), constant(0.3)), map[int]time.Duration{1: 3 * time.Second})
	want(t, retry.NewFixedDelay(maxDuration, true, constant(1)), map[int]time.Duration{1: maxDuration})
	want(t, retry.NewFixedDelay(-time.Second, true, constant(1)), map[int]time.Duration{1: 0})
	// WithMultiplier does not apply.
	want(t, retry.NewFixedDelay(time.Second, false, retry.WithMultiplier(3)), map[int]time.Duration{5: time.Second})
}

func TestNoRetry(t *testing.T) {
	t.Parallel()
	want(t, retry.NewNoRetry(), map[int]time.Duration{0: retry.Stop, 1: retry.Stop, 1000: retry.Stop})
}

func TestPresets(t *testing.T) {
	t.Parallel()
	want(t, retry.DurableBackoff(), map[int]time.Duration{
		1: time.Minute, 2: 2 * time.Minute, 3: 4 * time.Minute, 4: 8 * time.Minute,
		5: 16 * time.Minute, 6: 32 * time.Minute, 7: time.Hour, 8: time.Hour, 1000: time.Hour,
	})
	want(t, retry.FastBackoff(), map[int]time.Duration{
		1: 2 * time.Second, 2: 4 * time.Second, 3: 8 * time.Second, 4: 16 * time.Second, 5: 32 * time.Second,
		6: 64 * time.Second, 7: 128 * time.Second, 8: 256 * time.Second, 9: 300 * time.Second, 1000: 300 * time.Second,
	})
	want(t, retry.InProcessBackoff(), map[int]time.Duration{
		1: time.Second, 2: 2 * time.Second, 3: 3 * time.Second, 4: 3 * time.Second, 1000: 3 * time.Second,
	})
	// RelayBackoff draws from its nominal schedule ±25 %, never above 1h
	// (its exact nominal schedule is checked in presets_internal_test.go).
	relay := retry.RelayBackoff()
	nominal := []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute,
		8 * time.Minute, 16 * time.Minute, 32 * time.Minute, time.Hour, time.Hour}
	for i, nom := range nominal {
		lo, hi := nom*3/4, min(nom*5/4, time.Hour)
		for range 200 {
			if d := relay.Delay(i + 1); d < lo || d > hi {
				t.Fatalf("RelayBackoff().Delay(%d) = %v, outside [%v, %v]", i+1, d, lo, hi)
			}
		}
	}
}
