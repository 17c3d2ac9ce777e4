package retry_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/retry"
)

func TestExecutePermanentStopsAtOnce(t *testing.T) {
	t.Parallel()
	for name, perm := range map[string]error{
		"marked":  errorhandling.Permanent(errFlaky),
		"wrapped": fmt.Errorf("sending: %w", errorhandling.Permanent(errFlaky)),
	} {
		fn, calls := failing(-1, perm)
		var gaveUp []error
		cfg := retry.NewConfig(5, retry.NewFixedDelay(time.Hour, false)).
			WithRetryCallback(func(int, error) { t.Errorf("%s: OnRetry called", name) }).
			WithGiveUpCallback(func(err error) { gaveUp = append(gaveUp, err) })
		err := retry.NewExecutor(cfg).Execute(context.Background(), fn)
		e := asError(t, err, retry.Permanent, 1)
		if calls.Load() != 1 || e.Last != perm || !errors.Is(err, errFlaky) || !errors.Is(err, retry.ErrPermanent) {
			t.Errorf("%s: calls = %d, err = %v", name, calls.Load(), err)
		}
		if len(gaveUp) != 1 || gaveUp[0] != err {
			t.Errorf("%s: OnGiveUp got %v, want [%v]", name, gaveUp, err)
		}
	}
}

func TestExecuteRetriesUnknownStopsOnBuiltinPermanent(t *testing.T) {
	t.Parallel()
	// Seed 004's "unknown is permanent" is not applied inside retry, but
	// the classifier's permanent verdicts are.
	classifier := errorhandling.NewErrorClassifier() // unknown is permanent here
	for name, c := range map[string]struct {
		err      error
		reason   retry.StopReason
		attempts int
	}{
		"unknown":   {errFlaky, retry.Exhausted, 3},
		"transient": {errorhandling.Transient(errFlaky), retry.Exhausted, 3},
		"http 503":  {errorhandling.WithHTTPStatus(errFlaky, 503), retry.Exhausted, 3},
		"http 422":  {errorhandling.WithHTTPStatus(errFlaky, 422), retry.Permanent, 1},
		"http 401":  {errorhandling.WithHTTPStatus(errFlaky, 401), retry.Exhausted, 3},
		"reason":    {errorhandling.WithReason(errFlaky, errorhandling.ReasonValidationFailure), retry.Permanent, 1},
	} {
		fn, calls := failing(-1, c.err)
		cfg := retry.NewConfig(3, retry.NewFixedDelay(0, false)).WithClassifier(classifier)
		err := retry.NewExecutor(cfg).Execute(context.Background(), fn)
		asError(t, err, c.reason, c.attempts)
		if int(calls.Load()) != c.attempts {
			t.Errorf("%s: calls = %d, want %d", name, calls.Load(), c.attempts)
		}
	}
}

func TestExecuteUserRules(t *testing.T) {
	t.Parallel()
	errBadInput := errors.New("bad input")
	errOK := errors.New("actually fine")
	classifier := errorhandling.NewErrorClassifier()
	classifier.AddRule(errorhandling.Rule{Name: "bad-input", Class: errorhandling.ClassPermanent,
		Match: func(err error) bool { return errors.Is(err, errBadInput) }})
	classifier.AddRule(errorhandling.Rule{Class: errorhandling.ClassPermanent, // no name
		Match: func(err error) bool { return err.Error() == "nameless" }})
	classifier.AddRule(errorhandling.Rule{Name: "override", Class: errorhandling.ClassTransient,
		Match: func(err error) bool { return errors.Is(err, errOK) }})
	for name, c := range map[string]struct {
		err      error
		reason   retry.StopReason
		attempts int
	}{
		"user rule permanent":          {fmt.Errorf("x: %w", errBadInput), retry.Permanent, 1},
		"nameless user rule permanent": {errors.New("nameless"), retry.Permanent, 1},
		"user rule beats marker":       {errorhandling.Permanent(errOK), retry.Exhausted, 3},
		"no rule":                      {errFlaky, retry.Exhausted, 3},
	} {
		fn, calls := failing(-1, c.err)
		cfg := retry.NewConfig(3, retry.NewFixedDelay(0, false)).WithClassifier(classifier)
		err := retry.NewExecutor(cfg).Execute(context.Background(), fn)
		asError(t, err, c.reason, c.attempts)
		if int(calls.Load()) != c.attempts {
			t.Errorf("%s: calls = %d, want %d", name, calls.Load(), c.attempts)
		}
	}
}

func TestExecuteRetryOnErrorCodes(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		err      error
		reason   retry.StopReason
		attempts int
	}{
		"listed code":          {errorhandling.WithCode(errFlaky, "rate_limit"), retry.Exhausted, 3},
		"derived code":         {fmt.Errorf("call: %w", context.DeadlineExceeded), retry.Exhausted, 3},
		"unlisted code":        {errorhandling.WithCode(errFlaky, "quota"), retry.NotRetryable, 1},
		"unlisted derived":     {errorhandling.WithHTTPStatus(errFlaky, 503), retry.NotRetryable, 1},
		"no code":              {errFlaky, retry.NotRetryable, 1},
		"permanent with code":  {errorhandling.Permanent(errorhandling.WithCode(errFlaky, "timeout")), retry.Permanent, 1},
		"explicit code wins":   {errorhandling.WithCode(context.DeadlineExceeded, "quota"), retry.NotRetryable, 1},
		"transient no code":    {errorhandling.Transient(errFlaky), retry.NotRetryable, 1},
		"listed code retrying": {errorhandling.WithCode(errorhandling.Transient(errFlaky), "timeout"), retry.Exhausted, 3},
	} {
		fn, calls := failing(-1, c.err)
		var gaveUp int
		cfg := retry.NewConfig(3, retry.NewFixedDelay(0, false))
		cfg.WithRetryOnErrorCodes("timeout", "rate_limit") // used as a statement, as seed 002 does
		cfg.WithGiveUpCallback(func(error) { gaveUp++ })
		err := retry.NewExecutor(cfg).Execute(context.Background(), fn)
		e := asError(t, err, c.reason, c.attempts)
		if int(calls.Load()) != c.attempts || gaveUp != 1 || e.Last != c.err {
			t.Errorf("%s: calls = %d, give-ups = %d, err = %v", name, calls.Load(), gaveUp, err)
		}
		if c.reason == retry.NotRetryable && !errors.Is(err, retry.ErrNotRetryable) {
			t.Errorf("%s: %v is not ErrNotRetryable", name, err)
		}
	}
}

func TestExecuteRetryAfterIsLowerBound(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		hint time.Duration
		want []time.Duration
	}{
		"longer hint":  {5 * time.Second, []time.Duration{5 * time.Second, 5 * time.Second}},
		"shorter hint": {500 * time.Millisecond, []time.Duration{time.Second, time.Second}},
	} {
		fake := newFake()
		fn, _ := failing(-1, errorhandling.RetryAfter(errFlaky, c.hint))
		ex := retry.NewExecutor(retry.NewConfig(3, retry.NewFixedDelay(time.Second, false)).WithClock(fake))
		waits, err := drive(t, fake, func() error { return ex.Execute(context.Background(), fn) })
		asError(t, err, retry.Exhausted, 3)
		if fmt.Sprint(waits) != fmt.Sprint(c.want) {
			t.Errorf("%s: waits = %v, want %v", name, waits, c.want)
		}
	}
}
