package retry

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/errorhandling"
)

// Executor calls an operation until it succeeds or a stop condition holds.
// It is safe for concurrent use; the callbacks of its Config may then be
// called concurrently.
type Executor struct {
	s settings
}

// NewExecutor returns an executor for a copy of cfg; a nil cfg means
// DefaultConfig.
func NewExecutor(cfg *Config) *Executor {
	s := cfg.settings()
	s.codes = slices.Clone(s.codes)
	return &Executor{s: s}
}

// Execute calls fn until it returns nil, and returns nil then. Otherwise it
// returns a *Error saying why it stopped:
//
//   - Permanent: the Config's classifier calls fn's error permanent: it is
//     marked errorhandling.Permanent, a user rule says so, or a built-in
//     rule does (an HTTP 4xx other than 408/425/429, a constraint
//     violation, malformed JSON). Every other error, unknown ones included,
//     is retried.
//   - NotRetryable: RetryOnErrorCodes is set and the error's code is not
//     in it.
//   - Exhausted: MaxAttempts counted tries have failed, or the Strategy
//     returned Stop (or any negative delay).
//   - Cancelled: ctx was done before a try (fn is not called at all if it
//     is done from the start), after a failed try, or during a wait; the
//     wait ends at once.
//
// After the n-th counted failure Execute waits Strategy.Delay(n), or the
// error's retry-after hint (errorhandling.RetryAfter) when that is longer.
// A recognised fault (errorhandling.Recognised) is not counted: its remedy
// runs and fn is tried again at once (after any retry-after hint), until
// MaxRemedies remedies have run in this call; then the fault is promoted to
// transient (errorhandling.Promote) and counted and backed off like any
// other. A remedy that returns an error is counted as run, and that failure
// is handled as transient.
func (e *Executor) Execute(ctx context.Context, fn func() error) error {
	return run(ctx, &e.s, fn)
}

// ExecuteWithValue is Execute for an operation that returns a value, with
// the executor built from cfg (nil means DefaultConfig). On success it
// returns fn's value; on failure the zero value and the *Error.
func ExecuteWithValue[T any](ctx context.Context, cfg *Config, fn func() (T, error)) (T, error) {
	s := cfg.settings()
	var v T
	err := run(ctx, &s, func() error {
		var err error
		v, err = fn()
		return err
	})
	if err != nil {
		var zero T
		return zero, err
	}
	return v, nil
}

// Do is Execute with the executor built from cfg (nil means DefaultConfig)
// and ctx handed to fn.
func Do(ctx context.Context, cfg *Config, fn func(ctx context.Context) error) error {
	s := cfg.settings()
	return run(ctx, &s, func() error { return fn(ctx) })
}

// run is the retry loop behind Execute, ExecuteWithValue and Do.
func run(ctx context.Context, s *settings, fn func() error) error {
	var attempts, failures, remedies int
	var last error
	for {
		if ctx.Err() != nil {
			return cancelled(ctx, attempts, last)
		}
		last = fn()
		attempts++
		if last == nil {
			return nil
		}
		if ctx.Err() != nil {
			return cancelled(ctx, attempts, last)
		}

		v := s.classifier.Classify(last)
		class := classOf(v)
		if class == errorhandling.ClassPermanent {
			return s.giveUp(Permanent, attempts, last)
		}
		wait := time.Duration(0)
		if class == errorhandling.ClassRecognised {
			v = errorhandling.Promote(v, remedies, s.maxRemedies)
			class = v.Class
			if class == errorhandling.ClassRecognised {
				remedies++
				if v.Remedy != nil && v.Remedy(ctx) != nil {
					class = errorhandling.ClassTransient
				}
			}
		}
		if class != errorhandling.ClassRecognised {
			if len(s.codes) > 0 && !slices.Contains(s.codes, v.Code) {
				return s.giveUp(NotRetryable, attempts, last)
			}
			failures++
			if failures >= s.maxAttempts {
				return s.giveUp(Exhausted, attempts, last)
			}
			wait = s.strategy.Delay(failures)
			if wait < 0 {
				return s.giveUp(Exhausted, attempts, last)
			}
		}
		wait = max(wait, v.RetryAfter)

		if s.onRetry != nil {
			s.onRetry(attempts, last)
		}
		if !clock.Sleep(s.clock, wait, ctx.Done()) {
			return cancelled(ctx, attempts, last)
		}
	}
}

// classOf returns how the executor treats a classified error: permanent
// or recognised when the classifier says so (a marker, a user rule, or a
// built-in rule such as an HTTP 422 or a constraint violation), transient
// otherwise. An unknown error is retried: seed 004's "unknown is permanent"
// is the relay's policy, not the executor's.
func classOf(v errorhandling.Classification) errorhandling.Class {
	switch v.Class {
	case errorhandling.ClassPermanent, errorhandling.ClassRecognised:
		return v.Class
	}
	return errorhandling.ClassTransient
}

// giveUp builds the *Error for a final failure and reports it to OnGiveUp.
func (s *settings) giveUp(reason StopReason, attempts int, last error) error {
	err := &Error{Reason: reason, Attempts: attempts, Last: last}
	if s.onGiveUp != nil {
		s.onGiveUp(err)
	}
	return err
}

// cancelled builds the *Error for a run ended by its context. The context's
// cause, when it has one, is kept beside ctx.Err().
func cancelled(ctx context.Context, attempts int, last error) error {
	ctxErr := ctx.Err()
	if cause := context.Cause(ctx); cause != nil && cause != ctxErr {
		ctxErr = fmt.Errorf("%w: %w", ctxErr, cause)
	}
	return &Error{Reason: Cancelled, Attempts: attempts, Last: last, ctxErr: ctxErr}
}
