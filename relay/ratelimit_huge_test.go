package relay

import (
	"testing"
	"time"
)

// TestRateLimitOverABillionASecond: a rate over a billion deliveries a
// second is finite and valid (Validate takes it, as config check does),
// but its interval between tokens rounded down to zero and newLimiter
// panicked dividing by it: serve crashed at its start with a stack trace.
// Such a limit limits nothing that matters, and must not crash.
func TestRateLimitOverABillionASecond(t *testing.T) {
	for _, rate := range []float64{2e9, 1e12, 1e300} {
		var l *limiter
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("newLimiter(PerSecond %g) panicked: %v", rate, p)
				}
			}()
			l = newLimiter(&RateLimit{PerSecond: rate, Burst: 3})
		}()
		now := time.Unix(1_700_000_000, 0)
		for i := range 3 {
			if d := l.take(now); d != 0 {
				t.Fatalf("PerSecond %g: token %d of a burst of 3 waits %v, want it at once", rate, i+1, d)
			}
		}
	}
}
