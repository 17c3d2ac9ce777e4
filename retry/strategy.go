// Package retry runs operations again when they fail transiently, waiting
// longer between tries according to a Strategy.
//
// A Strategy maps the number of failures so far to the next wait.
// ExponentialBackoff, LinearBackoff, FixedDelay and NoRetry are the
// strategies of the design; DurableBackoff, RelayBackoff, FastBackoff and
// InProcessBackoff are the schedules Backstop's engines use.
//
// An Executor, built from a Config, calls a function until it succeeds, the
// error is permanent, the attempts run out or the context is done:
//
//	executor := retry.NewExecutor(retry.DefaultConfig())
//	err := executor.Execute(ctx, func() error {
//		return doSomething()
//	})
//
// The executor retries every error that is not marked permanent
// (errorhandling.Permanent), including errors nobody classified: inside one
// operation an unexplained failure is worth another try. Recognised faults
// (errorhandling.Recognised) have their remedy run and are tried again at
// once; a retry-after hint (errorhandling.RetryAfter) is a lower bound on the
// wait. A failure ends in a *Error that says why the executor stopped.
package retry

import "time"

// Stop is the delay a Strategy returns when no further try must be made.
const Stop time.Duration = -1

// Strategy maps the number of consecutive failures so far, n >= 1, to the
// wait before the next try, or to Stop. Implementations must be safe for
// concurrent use: one strategy is shared by every executor, tracker and
// store that is configured with it.
type Strategy interface {
	Delay(n int) time.Duration
}
