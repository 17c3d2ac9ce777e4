package circuitbreaker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/backstophq/backstop/clock"
)

// CircuitBreaker guards calls to one destination. Create it with New; it is
// safe for concurrent use.
//
// In the closed state a successful call costs one atomic load before it
// runs and, when it returns, one reading of the clock, one atomic add to the
// sliding window and one atomic load; it takes no lock and allocates
// nothing. Locks are taken only for failures that trip the breaker, for
// transitions, for the half-open trial calls, for outcomes that arrive after
// a transition, and once per window bucket period.
type CircuitBreaker struct {
	// Read-mostly: the state word and the settings.
	word        atomic.Uint64 // packWord(generation, state)
	openUntil   atomic.Int64  // ticks at which the open state ends
	maxFailures int64
	timeout     int64 // ticks
	halfOpenMax int
	rateOn      bool
	rate        float64
	minRequests int64
	isFailure   func(error) bool
	onChange    func(from, to State)
	logger      *slog.Logger
	name        string
	clock       clock.Clock
	realClock   bool      // clock is clock.Real: read it with time.Since
	base        time.Time // ticks are nanoseconds since base

	_ [64]byte // cache-line padding: the groups below are written at different rates

	// Read on every success, written on failures.
	consecFail  atomic.Int64
	succMark    atomic.Int64 // total successes at the last failure or reset
	lastFailure atomic.Int64 // ticks+1 of the last failure; 0 means none

	_ [64]byte

	ignored  atomic.Int64
	rejected atomic.Int64 // written on every rejection

	_ [64]byte

	win window // its current bucket is written on every outcome

	mu           sync.Mutex // guards the fields below and all transitions
	halfInFlight int
	halfSucc     int
	lastChange   int64 // ticks
	events       []transition
	draining     bool
}

// New returns a closed CircuitBreaker configured by cfg. A nil cfg means
// DefaultConfig(); zero fields mean their defaults. New panics if
// cfg.Validate fails: an invalid Config is a programming error, and callers
// that build one from input call Validate first.
func New(cfg *Config) *CircuitBreaker {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	c := cfg.withDefaults()
	cb := &CircuitBreaker{
		maxFailures: int64(c.MaxFailures),
		timeout:     int64(c.Timeout),
		halfOpenMax: c.HalfOpenMaxRequests,
		rateOn:      c.FailureRateThreshold > 0,
		rate:        c.FailureRateThreshold,
		minRequests: int64(c.MinimumRequests),
		isFailure:   c.IsFailure,
		onChange:    c.OnStateChange,
		logger:      c.Logger,
		name:        c.Name,
		clock:       c.Clock,
		realClock:   c.Clock == clock.Real,
		base:        c.Clock.Now(),
	}
	cb.win.width = int64(c.Window) / WindowBuckets
	return cb
}

// Name returns Config.Name.
func (cb *CircuitBreaker) Name() string { return cb.name }

// ticks returns the clock's time as nanoseconds since the breaker was made.
func (cb *CircuitBreaker) ticks() int64 {
	if cb.realClock {
		// time.Since reads only the monotonic clock, half the cost of
		// time.Now.
		return int64(time.Since(cb.base))
	}
	d := int64(cb.clock.Now().Sub(cb.base))
	if d < 0 {
		return 0
	}
	return d
}

// timeAt turns ticks back into a time on the breaker's clock, without a
// monotonic reading.
func (cb *CircuitBreaker) timeAt(ticks int64) time.Time {
	return cb.base.Add(time.Duration(ticks)).Round(0)
}

// Execute runs fn if the breaker lets the call through, records its outcome
// and returns fn's error unchanged.
//
// If the breaker rejects the call, Execute returns ErrCircuitOpen without
// calling fn. If ctx is already done, Execute returns ctx.Err() without
// calling fn, and the call is not counted at all. A panic in fn counts as a
// failure and is not recovered.
func (cb *CircuitBreaker) Execute(ctx context.Context, fn func() error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p, err := cb.Allow()
	if err != nil {
		return err
	}
	returned := false
	defer func() {
		if !returned {
			p.finish(outcomeFailure)
		}
	}()
	err = fn()
	returned = true
	p.Done(err)
	return err
}

// ExecuteWithValue is Execute for a function that returns a value. It
// returns fn's value and error unchanged, or the zero T and the error of a
// call that was not run (ErrCircuitOpen, or ctx.Err()).
func ExecuteWithValue[T any](ctx context.Context, cb *CircuitBreaker, fn func() (T, error)) (T, error) {
	var v T
	err := cb.Execute(ctx, func() error {
		var err error
		v, err = fn()
		return err
	})
	return v, err
}

// Permit is a call the breaker let through, from Allow. Report the call's
// outcome with Done, exactly once; a half-open trial slot stays taken until
// Done is called. The zero Permit's Done does nothing.
type Permit struct {
	cb   *CircuitBreaker
	word uint64
}

// Allow asks to make a call, for callers that cannot wrap it in a function
// and learn its outcome later. It returns ErrCircuitOpen if the breaker
// rejects the call, and otherwise a Permit whose Done must be given the
// call's error.
func (cb *CircuitBreaker) Allow() (Permit, error) {
	w := cb.word.Load()
	if wordState(w) == StateClosed {
		return Permit{cb, w}, nil
	}
	return cb.allowSlow(w)
}

// Done records the outcome of the permitted call: nil is a success, and an
// error is a failure, a success or ignored as Config.IsFailure decides. If
// IsFailure panics, the call is recorded as ignored (a half-open trial
// slot is given back) and the panic goes on to Done's caller.
func (p Permit) Done(err error) {
	if p.cb == nil {
		return
	}
	o := outcomeSuccess
	if err != nil {
		o = p.judge(err)
	}
	p.finish(o)
}

// judge returns the outcome of a call that returned err.
func (p Permit) judge(err error) outcome {
	judged := false
	defer func() {
		if !judged { // IsFailure panicked: free the permit, then let the panic go on
			p.finish(outcomeIgnored)
		}
	}()
	o := outcomeSuccess
	switch {
	case p.cb.isFailure(err):
		o = outcomeFailure
	case errors.Is(err, context.Canceled):
		o = outcomeIgnored
	}
	judged = true
	return o
}

type outcome int

const (
	outcomeSuccess outcome = iota
	outcomeFailure
	outcomeIgnored
)

func (p Permit) finish(o outcome) {
	cb := p.cb
	if wordState(p.word) == StateClosed && cb.word.Load() == p.word {
		cb.finishClosed(p.word, o)
		return
	}
	cb.finishSlow(p.word, o)
}

// finishClosed records an outcome of a call admitted in the current closed
// generation. Successes take no lock.
func (cb *CircuitBreaker) finishClosed(w uint64, o outcome) {
	if o == outcomeIgnored {
		cb.ignored.Add(1)
		return
	}
	now := cb.ticks()
	if o == outcomeSuccess {
		cb.win.add(now, false)
		if cb.consecFail.Load() != 0 {
			cb.consecFail.Store(0)
		}
		return
	}
	if cb.noteFailure(now) >= cb.maxFailures || cb.rateTripped(now) {
		cb.mu.Lock()
		changed := cb.word.Load() == w && cb.toOpen(now)
		cb.mu.Unlock()
		if changed {
			cb.notify()
		}
	}
}

// rateTripped reports whether the failure rate in the window ending at now
// opens the breaker.
func (cb *CircuitBreaker) rateTripped(now int64) bool {
	if !cb.rateOn {
		return false
	}
	succ, fail := cb.win.counts(now)
	total := succ + fail
	return total >= cb.minRequests && float64(fail) >= cb.rate*float64(total)
}

// State returns the breaker's state, first moving an open breaker whose
// timeout has passed to half-open.
func (cb *CircuitBreaker) State() State {
	w := cb.word.Load()
	if wordState(w) == StateOpen {
		cb.expireOpen(w, cb.ticks())
		w = cb.word.Load()
	}
	return wordState(w)
}

// Reset forces the breaker closed and clears its consecutive counts and
// sliding window; the lifetime totals of Stats are kept. Outcomes of calls
// let through before Reset are counted in the totals only.
func (cb *CircuitBreaker) Reset() {
	now := cb.ticks()
	cb.mu.Lock()
	changed := cb.toClosed(now)
	cb.mu.Unlock()
	if changed {
		cb.notify()
	}
}
