package retry

import (
	"slices"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/errorhandling"
)

// Config says how an Executor retries. The zero value is usable: one try,
// no retry. Build one with NewConfig or DefaultConfig and adjust it with the
// With… methods, which change the Config they are called on and return it
// for chaining. NewExecutor copies the Config, so changing it afterwards
// does not affect executors already built.
type Config struct {
	// MaxAttempts is the most tries, the first one included. Zero or
	// negative means 1: no retry. Tries that only apply a recognised
	// fault's remedy are not counted (MaxRemedies bounds them).
	MaxAttempts int
	// Strategy gives the wait after each counted failure; a Stop ends the
	// retries. Nil means DefaultExponentialBackoff.
	Strategy Strategy
	// RetryOnErrorCodes, when not empty, restricts retries to errors
	// whose code is listed: the code attached with errorhandling.WithCode,
	// or else the one the Classifier derives ("timeout", "rate_limit",
	// "http_500", …). Other errors stop the executor with NotRetryable.
	// Recognised faults are remedied whatever their code; the list applies
	// to them once they are promoted to transient. Empty means every error
	// that is not permanent is retried.
	RetryOnErrorCodes []string
	// OnRetry, when not nil, is called before each retry (and its wait)
	// with the number of the try that just failed, counting from 1, and
	// its error.
	OnRetry func(attempt int, err error)
	// OnGiveUp, when not nil, is called once when the executor stops
	// without success, with the *Error it returns. It is not called when
	// the context ends the run (Cancelled): the caller gave up, not the
	// operation, which may well be tried again later.
	OnGiveUp func(err error)
	// Clock times the waits. Nil means clock.Real.
	Clock clock.Clock
	// Classifier reads error codes, retry-after hints and remedies, and
	// says which errors are permanent. Nil means a classifier with only
	// the built-in rules (errorhandling.NewErrorClassifier). Whatever the
	// classifier, an unknown error is retried here; an error it calls
	// ClassPermanent (a marker, a user rule, or a built-in rule such as an
	// HTTP 422) stops the executor at once.
	Classifier *errorhandling.ErrorClassifier
	// MaxRemedies is how many times a recognised fault's remedy is run in
	// one Execute before the fault is promoted to transient and backed
	// off like any other. Zero or negative means
	// errorhandling.DefaultMaxRemedies.
	MaxRemedies int
}

// NewConfig returns a Config making at most maxAttempts tries in total (the
// first included; less than 1 means 1) and waiting as strategy says
// between them (nil means DefaultExponentialBackoff).
func NewConfig(maxAttempts int, strategy Strategy) *Config {
	return &Config{MaxAttempts: max(maxAttempts, 1), Strategy: strategy}
}

// DefaultConfig returns a Config of 3 tries with DefaultExponentialBackoff:
// waits of about 1s and 2s, ±25%.
func DefaultConfig() *Config {
	return NewConfig(3, DefaultExponentialBackoff())
}

// WithRetryOnErrorCodes sets RetryOnErrorCodes to a copy of codes,
// replacing any list set before; no codes clears the restriction.
func (c *Config) WithRetryOnErrorCodes(codes ...string) *Config {
	c.RetryOnErrorCodes = slices.Clone(codes)
	return c
}

// WithRetryCallback sets OnRetry.
func (c *Config) WithRetryCallback(fn func(attempt int, err error)) *Config {
	c.OnRetry = fn
	return c
}

// WithGiveUpCallback sets OnGiveUp.
func (c *Config) WithGiveUpCallback(fn func(err error)) *Config {
	c.OnGiveUp = fn
	return c
}

// WithClock sets Clock.
func (c *Config) WithClock(clk clock.Clock) *Config {
	c.Clock = clk
	return c
}

// WithClassifier sets Classifier.
func (c *Config) WithClassifier(classifier *errorhandling.ErrorClassifier) *Config {
	c.Classifier = classifier
	return c
}

// WithMaxRemedies sets MaxRemedies.
func (c *Config) WithMaxRemedies(n int) *Config {
	c.MaxRemedies = n
	return c
}

// defaultStrategy and defaultClassifier stand in for nil Config fields.
// Both are immutable (the classifier is never given rules or codes).
var (
	defaultStrategy   Strategy = DefaultExponentialBackoff()
	defaultClassifier          = errorhandling.NewErrorClassifier()
)

// settings is a Config with its defaults applied.
type settings struct {
	maxAttempts int
	strategy    Strategy
	codes       []string
	onRetry     func(int, error)
	onGiveUp    func(error)
	clock       clock.Clock
	classifier  *errorhandling.ErrorClassifier
	maxRemedies int
}

// settings applies the defaults; a nil Config is DefaultConfig. The codes
// slice is shared with c, so callers that keep the result clone it.
func (c *Config) settings() settings {
	if c == nil {
		return settings{maxAttempts: 3, strategy: defaultStrategy, clock: clock.Real, classifier: defaultClassifier, maxRemedies: errorhandling.DefaultMaxRemedies}
	}
	s := settings{
		maxAttempts: max(c.MaxAttempts, 1),
		strategy:    c.Strategy,
		codes:       c.RetryOnErrorCodes,
		onRetry:     c.OnRetry,
		onGiveUp:    c.OnGiveUp,
		clock:       clock.OrReal(c.Clock),
		classifier:  c.Classifier,
		maxRemedies: c.MaxRemedies,
	}
	if s.strategy == nil {
		s.strategy = defaultStrategy
	}
	if s.classifier == nil {
		s.classifier = defaultClassifier
	}
	if s.maxRemedies <= 0 {
		s.maxRemedies = errorhandling.DefaultMaxRemedies
	}
	return s
}
