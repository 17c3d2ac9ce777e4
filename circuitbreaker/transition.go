package circuitbreaker

import (
	"context"
	"log/slog"
	"math"
)

// allowSlow admits or rejects a call when the breaker was not closed at the
// first look.
func (cb *CircuitBreaker) allowSlow(w uint64) (Permit, error) {
	if wordState(w) == StateOpen {
		now := cb.ticks()
		if now < cb.openUntil.Load() {
			cb.rejected.Add(1)
			return Permit{}, ErrCircuitOpen
		}
		cb.mu.Lock()
		changed := cb.word.Load() == w && cb.toHalfOpen(now)
		p, err := cb.admitLocked()
		cb.mu.Unlock()
		if changed {
			cb.notify()
		}
		return p, err
	}
	cb.mu.Lock()
	p, err := cb.admitLocked()
	cb.mu.Unlock()
	return p, err
}

// admitLocked admits a call in the current state: always when closed, while
// a trial slot is free when half-open, never when open. cb.mu is held.
func (cb *CircuitBreaker) admitLocked() (Permit, error) {
	w := cb.word.Load()
	switch wordState(w) {
	case StateClosed:
		return Permit{cb, w}, nil
	case StateHalfOpen:
		if cb.halfInFlight < cb.halfOpenMax {
			cb.halfInFlight++
			return Permit{cb, w}, nil
		}
	}
	cb.rejected.Add(1)
	return Permit{}, ErrCircuitOpen
}

// finishSlow records the outcome of a half-open trial call, or of a call
// admitted in an earlier generation, which counts in the totals only.
func (cb *CircuitBreaker) finishSlow(w uint64, o outcome) {
	now := cb.ticks()
	cb.mu.Lock()
	if cb.word.Load() != w || wordState(w) != StateHalfOpen {
		cb.finishStaleLocked(now, o)
		cb.mu.Unlock()
		return
	}
	changed := false
	if cb.halfInFlight > 0 { // guards against Done called twice
		cb.halfInFlight--
	}
	switch o {
	case outcomeIgnored:
		cb.ignored.Add(1)
	case outcomeSuccess:
		cb.win.add(now, false)
		cb.halfSucc++
		if cb.halfSucc >= cb.halfOpenMax {
			changed = cb.toClosed(now)
		}
	case outcomeFailure:
		cb.noteFailure(now)
		changed = cb.toOpen(now)
	}
	cb.mu.Unlock()
	if changed {
		cb.notify()
	}
}

// finishStaleLocked counts an outcome that arrived after the generation it
// was admitted in had ended: in the totals, not in the window or the
// consecutive counts.
func (cb *CircuitBreaker) finishStaleLocked(now int64, o outcome) {
	switch o {
	case outcomeIgnored:
		cb.ignored.Add(1)
	case outcomeSuccess:
		cb.win.addRetired(false)
		cb.succMark.Add(1) // not a consecutive success
	case outcomeFailure:
		cb.win.addRetired(true)
		cb.lastFailure.Store(now + 1)
	}
}

// noteFailure counts a failure at now in the window and the consecutive
// counts, and returns the number of consecutive failures.
func (cb *CircuitBreaker) noteFailure(now int64) int64 {
	cb.win.add(now, true)
	cb.lastFailure.Store(now + 1)
	succ, _ := cb.win.totals()
	cb.succMark.Store(succ)
	return cb.consecFail.Add(1)
}

// expireOpen moves the breaker from open to half-open if it is still in the
// open generation w and its timeout has passed at now.
func (cb *CircuitBreaker) expireOpen(w uint64, now int64) {
	if now < cb.openUntil.Load() {
		return
	}
	cb.mu.Lock()
	changed := cb.word.Load() == w && cb.toHalfOpen(now)
	cb.mu.Unlock()
	if changed {
		cb.notify()
	}
}

// The to… methods make a transition at now; cb.mu is held. They report
// whether the state changed, in which case the caller calls notify after
// unlocking.

func (cb *CircuitBreaker) toOpen(now int64) bool {
	until := now + cb.timeout
	if until < now { // a Timeout so long it overflows: open for good
		until = math.MaxInt64
	}
	cb.openUntil.Store(until)
	cb.halfInFlight, cb.halfSucc = 0, 0
	return cb.setState(StateOpen, now)
}

func (cb *CircuitBreaker) toHalfOpen(now int64) bool {
	cb.halfInFlight, cb.halfSucc = 0, 0
	cb.consecFail.Store(0)
	succ, _ := cb.win.totalsLocked()
	cb.succMark.Store(succ)
	return cb.setState(StateHalfOpen, now)
}

func (cb *CircuitBreaker) toClosed(now int64) bool {
	cb.halfInFlight, cb.halfSucc = 0, 0
	cb.consecFail.Store(0)
	cb.win.clear()
	succ, _ := cb.win.totalsLocked()
	cb.succMark.Store(succ)
	return cb.setState(StateClosed, now)
}

// setState starts a new generation in state to and queues the state change
// for notify. It reports whether the state changed.
func (cb *CircuitBreaker) setState(to State, now int64) bool {
	w := cb.word.Load()
	from := wordState(w)
	cb.word.Store(packWord(wordGen(w)+1, to))
	if from == to {
		return false
	}
	cb.lastChange = now
	succ, fail := cb.win.counts(now)
	cb.events = append(cb.events, transition{
		from: from, to: to,
		consecFail:  cb.consecFail.Load(),
		windowTotal: succ + fail,
		windowFail:  fail,
	})
	return true
}

// transition is a state change waiting to be reported.
type transition struct {
	from, to    State
	consecFail  int64
	windowTotal int64
	windowFail  int64
}

// notify reports queued state changes, one at a time and in order, without
// holding cb.mu, so that OnStateChange may call back into the breaker. If
// another goroutine is already reporting, it reports ours too and notify
// returns at once.
func (cb *CircuitBreaker) notify() {
	cb.mu.Lock()
	if cb.draining {
		cb.mu.Unlock()
		return
	}
	cb.draining = true
	finished := false
	defer func() {
		if !finished { // OnStateChange panicked; let the next transition report
			cb.mu.Lock()
			cb.draining = false
			cb.mu.Unlock()
		}
	}()
	for len(cb.events) > 0 {
		e := cb.events[0]
		n := copy(cb.events, cb.events[1:])
		cb.events = cb.events[:n]
		cb.mu.Unlock()
		cb.report(e)
		cb.mu.Lock()
	}
	cb.draining = false
	finished = true
	cb.mu.Unlock()
}

func (cb *CircuitBreaker) report(e transition) {
	level := slog.LevelInfo
	if e.to == StateOpen {
		level = slog.LevelWarn
	}
	logger := cb.logger
	if logger == nil {
		logger = slog.Default()
	}
	logger.LogAttrs(context.Background(), level, "circuit breaker state changed",
		slog.String("breaker", cb.name),
		slog.String("from", e.from.String()),
		slog.String("to", e.to.String()),
		slog.Int64("consecutive_failures", e.consecFail),
		slog.Int64("window_requests", e.windowTotal),
		slog.Int64("window_failures", e.windowFail),
	)
	if cb.onChange != nil {
		cb.onChange(e.from, e.to)
	}
}
