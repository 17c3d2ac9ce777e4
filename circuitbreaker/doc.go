// Package circuitbreaker stops calls to a destination that keeps failing, so
// that a failing service gets room to recover and callers fail fast instead
// of piling up behind timeouts.
//
// A CircuitBreaker has three states:
//
//	Closed    --MaxFailures consecutive failures, or failure rate--> Open
//	Open      --Timeout elapsed------------------------------------> HalfOpen
//	HalfOpen  --HalfOpenMaxRequests successes----------------------> Closed
//	HalfOpen  --any failure----------------------------------------> Open
//
// Closed lets every call through and counts outcomes. Open rejects every
// call with ErrCircuitOpen until Timeout has passed; the move to HalfOpen is
// made lazily, by the first call (or State or GetStats) that finds the
// timeout elapsed on the Config's clock. HalfOpen lets at most
// HalfOpenMaxRequests trial calls run at once and rejects the rest with
// ErrCircuitOpen. Reset forces the breaker back to Closed.
//
// Which errors are failures is decided by Config.IsFailure. By default it
// asks an errorhandling.ErrorClassifier: a fault blamed on the message
// (errorhandling.BlameMessage, such as an HTTP 400 or an
// errorhandling.Permanent error) says nothing about the destination's
// health and is not a failure, and neither is context.Canceled; everything
// else is.
//
// Execute wraps a function; Allow and Permit.Done are the two-step form for
// callers that learn the outcome later. Both are safe for concurrent use. A
// call in the closed state allocates nothing, and a successful one takes no
// lock (save once per window bucket period); the benchmarks compare it with
// sony/gobreaker.
package circuitbreaker
