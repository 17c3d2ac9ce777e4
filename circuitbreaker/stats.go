package circuitbreaker

import "time"

// Stats is a snapshot of a CircuitBreaker's state and counts.
//
// The Total counts run from New and are never cleared, not even by Reset,
// so they can feed monotonic metrics. Under concurrent calls the snapshot
// is consistent to within the calls finishing while it is taken.
type Stats struct {
	// State is the current state.
	State State
	// ConsecutiveFailures is the number of failures since the last success
	// or transition to half-open or closed. It is kept while the breaker is
	// open, showing the run that opened it.
	ConsecutiveFailures int
	// ConsecutiveSuccesses is the number of successes since the last
	// failure or transition to half-open or closed; in the half-open state,
	// the trial calls that have succeeded.
	ConsecutiveSuccesses int

	// TotalRequests is the number of calls let through whose outcome has
	// been reported: TotalSuccesses + TotalFailures + TotalIgnored. Calls
	// still running and rejected calls are not in it.
	TotalRequests int64
	// TotalSuccesses is the number of calls that succeeded, including
	// calls whose error Config.IsFailure did not count as a failure.
	TotalSuccesses int64
	// TotalFailures is the number of calls that failed.
	TotalFailures int64
	// TotalIgnored is the number of calls whose outcome counted as neither
	// success nor failure: errors that wrap context.Canceled and that
	// Config.IsFailure does not count as failures.
	TotalIgnored int64
	// TotalRejected is the number of calls rejected with ErrCircuitOpen.
	TotalRejected int64

	// WindowRequests is the number of successes and failures in the
	// current sliding window (Config.Window). The window is emptied when
	// the breaker closes.
	WindowRequests int64
	// WindowFailures is the number of failures in the current sliding
	// window.
	WindowFailures int64

	// LastStateChange is when the state last changed; the time of New if
	// it never has.
	LastStateChange time.Time
	// LastFailure is when the last failure was reported; zero if none has
	// been.
	LastFailure time.Time
	// OpenUntil is when the open state ends and trial calls are let
	// through; zero unless State is StateOpen.
	OpenUntil time.Time
}

// GetStats returns a snapshot of the breaker's state and counts, first
// moving an open breaker whose timeout has passed to half-open.
func (cb *CircuitBreaker) GetStats() Stats {
	now := cb.ticks()
	if w := cb.word.Load(); wordState(w) == StateOpen {
		cb.expireOpen(w, now)
	}

	cb.mu.Lock()
	defer cb.mu.Unlock()
	cb.win.mu.Lock()
	succ, fail := cb.win.totals()
	winSucc, winFail := cb.win.counts(now)
	cb.win.mu.Unlock()

	s := Stats{
		State:                wordState(cb.word.Load()),
		ConsecutiveFailures:  int(cb.consecFail.Load()),
		ConsecutiveSuccesses: int(max(0, succ-cb.succMark.Load())),
		TotalSuccesses:       succ,
		TotalFailures:        fail,
		TotalIgnored:         cb.ignored.Load(),
		TotalRejected:        cb.rejected.Load(),
		WindowRequests:       winSucc + winFail,
		WindowFailures:       winFail,
		LastStateChange:      cb.timeAt(cb.lastChange),
	}
	s.TotalRequests = s.TotalSuccesses + s.TotalFailures + s.TotalIgnored
	if lf := cb.lastFailure.Load(); lf != 0 {
		s.LastFailure = cb.timeAt(lf - 1)
	}
	if s.State == StateOpen {
		s.OpenUntil = cb.timeAt(cb.openUntil.Load())
	}
	return s
}
