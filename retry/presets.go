package retry

import "time"

// The presets below are the schedules Backstop's engines use. Each call
// returns a new strategy; a strategy is immutable, so sharing one is also
// fine.

// DurableBackoff returns the durable, across-attempts schedule of the work
// coordination core (seed 000's scheduled_for = now + 30s*2^attempts):
// base 1 minute, doubling, capped at 1 hour, no jitter.
//
//	n   delay
//	1   1m
//	2   2m
//	3   4m
//	4   8m
//	5   16m
//	6   32m
//	7+  1h  (64m capped)
func DurableBackoff() Strategy {
	return NewExponentialBackoff(time.Minute, time.Hour, false)
}

// RelayBackoff returns the relay's default schedule (VISION.md): base 30s,
// doubling, capped at 1 hour, with ±25% jitter applied after the cap, so no
// delay exceeds 1 hour.
//
//	n   nominal  drawn from
//	1   30s      [22.5s, 37.5s]
//	2   1m       [45s, 1m15s]
//	3   2m       [1m30s, 2m30s]
//	4   4m       [3m, 5m]
//	5   8m       [6m, 10m]
//	6   16m      [12m, 20m]
//	7   32m      [24m, 40m]
//	8+  1h       [45m, 1h]  (64m capped)
func RelayBackoff() Strategy {
	return NewExponentialBackoff(30*time.Second, time.Hour, true)
}

// FastBackoff returns the per-message schedule of seed 003: base 2s,
// doubling, capped at 300s (5 minutes), no jitter.
//
//	n   delay
//	1   2s
//	2   4s
//	3   8s
//	4   16s
//	5   32s
//	6   1m4s
//	7   2m8s
//	8   4m16s
//	9+  5m  (512s capped)
func FastBackoff() Strategy {
	return NewExponentialBackoff(2*time.Second, 300*time.Second, false)
}

// InProcessBackoff returns seed 001's quick in-process schedule for blips
// inside one delivery attempt: linear, base 0, increment 1s, capped at 3s,
// no jitter. Pair it with NewConfig(3, …) for seed 001's "3 tries".
//
//	n   delay
//	1   1s
//	2   2s
//	3+  3s
func InProcessBackoff() Strategy {
	return NewLinearBackoff(0, 3*time.Second, time.Second, false)
}
