// Package tracker decides when an operation on a failing context may be
// tried again, and when its failure is worth telling an operator about.
//
// A Tracker follows one context: a destination, a message, or a process (an
// operation on one input). Its contract is seed 004's:
//
//	tok, ok := t.TryProceed() // before the operation
//	...
//	t.Fault()                 // or t.Success(), to record the outcome
//
// TryProceed says whether to go ahead now; when it says no, the RetryToken
// it returns is the end of the current back-off period and can be waited on
// or combined with other tokens (And for a service and its parameter, Or
// for independent services).
//
// A Registry holds one tracker per key with bounded memory, evicting the
// least recently used and the long idle. A Blamer pairs a registry of
// services with a registry of processes and charges each fault to exactly
// one of them according to its errorhandling.Classification.
//
// A tracker reports to the operations log once per failing stretch: one
// WARN "tracker threshold crossed" when its consecutive faults reach
// Config.ReportAfterFaults or its failing time reaches
// Config.ReportAfterDuration, and one WARN "tracker recovered" at the next
// Success. Faults below the threshold are logged at DEBUG only.
package tracker

import (
	"log/slog"
	"sync"
	"time"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/retry"
)

// DefaultReportAfterFaults is the consecutive fault count at which a
// tracker reports when Config.ReportAfterFaults is zero.
const DefaultReportAfterFaults = 5

// Config configures a Tracker. Its zero value is ready to use.
type Config struct {
	// Strategy maps the consecutive fault count n >= 1 to the back-off
	// after the n-th fault. A delay of retry.Stop (or any negative delay)
	// gives a token that never expires: the context stays closed until
	// Success is called. Nil means the default: 1s, doubling per fault,
	// capped at 5m (1s, 2s, 4s, ... 4m16s, then 5m).
	Strategy retry.Strategy
	// Clock reads time and makes the timers tokens wait on. Nil means
	// clock.Real.
	Clock clock.Clock
	// Name identifies the tracker in logs and reports. Empty is allowed.
	// In a Registry it is a prefix: each tracker is named Name + "/" + key,
	// or key alone when Name is empty.
	Name string
	// Logger receives the tracker's reports. Nil means slog.Default() at
	// the time of logging.
	Logger *slog.Logger
	// ReportAfterFaults is the consecutive fault count at which the
	// tracker reports. Zero means DefaultReportAfterFaults; a negative
	// value turns reporting by count off.
	ReportAfterFaults int
	// ReportAfterDuration is how long after the first fault of a failing
	// stretch the tracker reports, if it is still failing, checked at each
	// Fault and TryProceed. Zero or negative turns reporting by time off.
	ReportAfterDuration time.Duration
	// OnReport, when not nil, is called with every report the tracker
	// logs, after logging it, synchronously and without the tracker's lock
	// held. It must not block for long.
	OnReport func(Report)
}

// Tracker follows the faults of one context and hands out back-off
// periods. It is safe for concurrent use.
//
// A tracker does not serialise the operations it guards: once the back-off
// has elapsed, every caller of TryProceed is told to proceed until the next
// Fault is recorded.
type Tracker struct {
	name        string
	strategy    retry.Strategy
	clk         clock.Clock
	logger      *slog.Logger
	afterFaults int
	afterDur    time.Duration
	onReport    func(Report)

	mu       sync.Mutex
	faults   int
	since    time.Time
	token    RetryToken
	reported bool

	// Registry bookkeeping, guarded by the owning Registry's mutex.
	key        string
	prev, next *Tracker
	used       time.Time
}

// New returns a healthy Tracker configured by cfg.
func New(cfg Config) *Tracker {
	t := &Tracker{
		name:        cfg.Name,
		strategy:    cfg.Strategy,
		clk:         clock.OrReal(cfg.Clock),
		logger:      cfg.Logger,
		afterFaults: cfg.ReportAfterFaults,
		afterDur:    cfg.ReportAfterDuration,
		onReport:    cfg.OnReport,
	}
	if t.strategy == nil {
		t.strategy = retry.NewExponentialBackoff(time.Second, 5*time.Minute, false)
	}
	if t.afterFaults == 0 {
		t.afterFaults = DefaultReportAfterFaults
	}
	t.token = RetryToken{clk: t.clk}
	return t
}

// Name returns the tracker's name.
func (t *Tracker) Name() string { return t.name }

// TryProceed is called before the operation. It returns true when the
// operation may go ahead now: the context is healthy, or its back-off has
// elapsed; the token is then expired. Otherwise it returns false and the
// token of the remaining back-off.
func (t *Tracker) TryProceed() (RetryToken, bool) {
	t.mu.Lock()
	tok := t.token
	rep, crossed := t.checkThreshold()
	t.mu.Unlock()
	if crossed {
		t.emit(rep)
	}
	return tok, tok.Expired()
}

// Fault records a failed operation: the consecutive fault count goes up by
// one and a back-off of Strategy.Delay(count) starts now. It returns the
// token of that back-off, which never expires if the strategy said stop.
func (t *Tracker) Fault() RetryToken {
	return t.FaultRetryAfter(0)
}

// FaultRetryAfter records a fault like Fault, but makes the back-off last
// at least atLeast, such as the Retry-After a rate-limited service asked
// for. A strategy's stop still wins: the token then never expires.
func (t *Tracker) FaultRetryAfter(atLeast time.Duration) RetryToken {
	t.mu.Lock()
	now := t.clk.Now()
	t.faults++
	if t.faults == 1 {
		t.since = now
	}
	d := t.strategy.Delay(t.faults)
	if d < 0 {
		t.token = Never(t.clk)
	} else {
		t.token = NewRetryToken(t.clk, now.Add(max(d, atLeast)))
	}
	tok, faults := t.token, t.faults
	rep, crossed := t.checkThreshold()
	t.mu.Unlock()
	if crossed {
		t.emit(rep)
	} else {
		t.debugFault(faults, tok)
	}
	return tok
}

// Success records a successful operation: the context is healthy again and
// its fault count is reset. If the failing stretch was reported, Success
// reports the recovery.
func (t *Tracker) Success() {
	t.mu.Lock()
	if t.faults == 0 {
		t.mu.Unlock()
		return
	}
	rep := Report{
		Event:        EventRecovered,
		Tracker:      t.name,
		Faults:       t.faults,
		FailingSince: t.since,
		FailingFor:   t.clk.Now().Sub(t.since),
		NextTry:      RetryToken{clk: t.clk},
	}
	reported := t.reported
	t.faults, t.since, t.reported = 0, time.Time{}, false
	t.token = RetryToken{clk: t.clk}
	t.mu.Unlock()
	if reported {
		t.emit(rep)
	}
}

// Faults returns the number of consecutive faults recorded since the last
// Success.
func (t *Tracker) Faults() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.faults
}

// FailingSince returns when the first fault of the current failing stretch
// was recorded, and the zero Time when the tracker is healthy.
func (t *Tracker) FailingSince() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.since
}

// Healthy reports whether no fault has been recorded since the last
// Success. A tracker whose back-off has elapsed is not healthy: it lets the
// next try through but still counts its faults.
func (t *Tracker) Healthy() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.faults == 0
}

// Token returns the token of the current back-off without the side effects
// of TryProceed: an expired token when the tracker is healthy or its
// back-off has elapsed.
func (t *Tracker) Token() RetryToken {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.token
}

// evictRank says how much is lost by forgetting the tracker: 0 when it is
// healthy, 1 when its back-off has elapsed (its fault count is lost), 2
// while it is backing off.
func (t *Tracker) evictRank() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.faults == 0:
		return 0
	case t.token.Expired():
		return 1
	}
	return 2
}
