package circuitbreaker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/errorhandling"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultMaxFailures         = 5
	DefaultTimeout             = 60 * time.Second
	DefaultHalfOpenMaxRequests = 1
	DefaultMinimumRequests     = 20
	DefaultWindow              = 60 * time.Second
)

// WindowBuckets is how many buckets the sliding window is cut into. The
// window slides one bucket (Window / WindowBuckets) at a time.
const WindowBuckets = 10

// Config configures a CircuitBreaker. The zero value is usable: every zero
// field means the default its comment gives. New copies the Config, so
// changing it afterwards has no effect on the breaker.
type Config struct {
	// Name identifies the breaker in logs. Empty means no name.
	Name string

	// MaxFailures is how many failures in a row, in the closed state, open
	// the breaker. Zero means DefaultMaxFailures (5). To trip on the
	// failure rate alone, set it to a number larger than any run of
	// failures you expect, such as math.MaxInt.
	MaxFailures int

	// Timeout is how long the breaker stays open before it lets trial calls
	// through (half-open). Zero means DefaultTimeout (60s).
	Timeout time.Duration

	// HalfOpenMaxRequests is both how many trial calls may run at once in
	// the half-open state and how many of them must succeed to close the
	// breaker. Zero means DefaultHalfOpenMaxRequests (1).
	HalfOpenMaxRequests int

	// FailureRateThreshold, in (0, 1], opens the breaker in the closed
	// state when the share of failures among the calls in the sliding
	// window reaches it (0.5 opens at 50% failures), provided the window
	// holds at least MinimumRequests calls. Zero means the failure rate is
	// not used; the window is still kept for GetStats.
	FailureRateThreshold float64

	// MinimumRequests is how many calls the sliding window must hold before
	// the failure rate can open the breaker. Zero means
	// DefaultMinimumRequests (20).
	MinimumRequests int

	// Window is the length of the sliding window over which the failure
	// rate is measured, kept as a ring of WindowBuckets buckets. Zero means
	// DefaultWindow (60s). Values under WindowBuckets nanoseconds are
	// rounded up to that.
	Window time.Duration

	// IsFailure reports whether an error returned by a call counts as a
	// failure of the destination. It is called only for non-nil errors and
	// must be safe for concurrent use. An error it rejects counts as a
	// success (the destination answered), except context.Canceled, which
	// counts as neither: the caller gave up and nothing was learnt.
	// Nil means DefaultIsFailure with Classifier.
	IsFailure func(err error) bool

	// Classifier is the classifier the default IsFailure asks. It is unused
	// when IsFailure is set. Nil means a classifier with only the built-in
	// rules (errorhandling.NewErrorClassifier()).
	Classifier *errorhandling.ErrorClassifier

	// OnStateChange, if set, is called after every transition with the old
	// and new state. It is called without any lock held, so it may call
	// any method of the breaker; calls are made one at a time, in the order
	// the transitions happened, but possibly on another goroutine than the
	// one whose call caused the transition and after that call returned.
	// Nil means no callback.
	OnStateChange func(from, to State)

	// Logger receives a WARN record when the breaker opens and an INFO
	// record on its other transitions. Nil means slog.Default() at the
	// time of the transition.
	Logger *slog.Logger

	// Clock is the time source. Nil means the wall clock (clock.Real).
	Clock clock.Clock
}

// DefaultConfig returns a Config with the defaults filled in: MaxFailures 5,
// Timeout 60s, HalfOpenMaxRequests 1, failure rate off.
func DefaultConfig() *Config {
	return &Config{
		MaxFailures:         DefaultMaxFailures,
		Timeout:             DefaultTimeout,
		HalfOpenMaxRequests: DefaultHalfOpenMaxRequests,
	}
}

// Validate reports the first field that holds an invalid value: a negative
// count or duration, or a FailureRateThreshold outside (0, 1] other than
// zero. Zero fields are valid; they mean the defaults. A nil Config is
// valid.
func (cfg *Config) Validate() error {
	if cfg == nil {
		return nil
	}
	switch {
	case cfg.MaxFailures < 0:
		return fieldError("MaxFailures", cfg.MaxFailures, "must not be negative")
	case cfg.Timeout < 0:
		return fieldError("Timeout", cfg.Timeout, "must not be negative")
	case cfg.HalfOpenMaxRequests < 0:
		return fieldError("HalfOpenMaxRequests", cfg.HalfOpenMaxRequests, "must not be negative")
	case math.IsNaN(cfg.FailureRateThreshold) || cfg.FailureRateThreshold < 0 || cfg.FailureRateThreshold > 1:
		return fieldError("FailureRateThreshold", cfg.FailureRateThreshold, "must be in (0, 1], or 0 for off")
	case cfg.MinimumRequests < 0:
		return fieldError("MinimumRequests", cfg.MinimumRequests, "must not be negative")
	case cfg.Window < 0:
		return fieldError("Window", cfg.Window, "must not be negative")
	}
	return nil
}

func fieldError(field string, value any, problem string) error {
	return fmt.Errorf("circuitbreaker: Config.%s %s, got %v", field, problem, value)
}

// withDefaults returns a copy of cfg with every zero field replaced by its
// default.
func (cfg *Config) withDefaults() Config {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.MaxFailures == 0 {
		c.MaxFailures = DefaultMaxFailures
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.HalfOpenMaxRequests == 0 {
		c.HalfOpenMaxRequests = DefaultHalfOpenMaxRequests
	}
	if c.MinimumRequests == 0 {
		c.MinimumRequests = DefaultMinimumRequests
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.Window < WindowBuckets {
		c.Window = WindowBuckets
	}
	if c.IsFailure == nil {
		classifier := c.Classifier
		c.IsFailure = func(err error) bool { return DefaultIsFailure(classifier, err) }
	}
	c.Clock = clock.OrReal(c.Clock)
	return c
}

// DefaultIsFailure is the rule Config.IsFailure defaults to. It reports
// whether err is a fault of the destination, as classifier sees it:
//
//   - nil and context.Canceled are not failures;
//   - an error the classifier blames on the message (a 4xx other than 408,
//     425 and 429, a constraint violation, an errorhandling.Permanent error,
//     or one wrapped with errorhandling.WithBlame(err, BlameMessage)) is
//     not a failure;
//   - everything else is, including errors nobody classified: the
//     classifier blames those on the message only by default, and a breaker
//     that ignored them would never open for a plain errors.New.
//
// A nil classifier means one with only the built-in rules.
func DefaultIsFailure(classifier *errorhandling.ErrorClassifier, err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	if classifier == nil {
		classifier = builtinClassifier
	}
	v := classifier.Classify(err)
	if v.Blame != errorhandling.BlameMessage {
		return true
	}
	if v.Class == errorhandling.ClassUnknown && v.Rule == "" {
		// Nothing classified it; the message blame is the classifier's
		// default, not a finding. Only an explicit WithBlame counts.
		_, explicit := errorhandling.BlameOf(err)
		return !explicit
	}
	return false
}

var builtinClassifier = errorhandling.NewErrorClassifier()
