// Package clockstep tells when a store's clock was stepped back, from its
// readings and the process's monotonic clock.
package clockstep

import (
	"sync"
	"time"
)

// Slack is how far behind its expected value a reading may be without
// counting as a step back: the readings are taken by the database at the
// start of a statement and timed here after its answer, so a slow round
// trip after a fast one shifts them by its length.
const Slack = 2 * time.Second

// Watch tells from successive readings of a clock that it was stepped
// back: a reading more than Slack behind the previous one plus the time
// that passed since on the process's monotonic clock. The zero Watch is
// ready; its first reading counts as a step (nothing says it was not).
type Watch struct {
	mu   sync.Mutex
	last time.Time // the previous reading
	at   time.Time // when it was taken, with its monotonic reading
	seen bool
}

// Back records reading and reports whether the clock was stepped back
// since the previous reading, or this is the first.
func (w *Watch) Back(reading time.Time) bool {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	back := !w.seen || reading.Before(w.last.Add(now.Sub(w.at)-Slack))
	w.last, w.at, w.seen = reading, now, true
	return back
}

// Forget drops the readings, so that the next counts as a step: a caller
// whose work after a step failed does it again at its next reading.
func (w *Watch) Forget() {
	w.mu.Lock()
	w.seen = false
	w.mu.Unlock()
}

// Forward keeps the latest reading of a store's clock with the process's
// monotonic reading taken before it, so that a later call can tell the
// store the earliest its clock can read now: the store takes a reading
// further ahead than a lease allows for as its clock stepped forward
// (the lease hold). The monotonic reading is taken before the call that
// reads the clock, so the expectation is never earlier than the clock's
// own: a slow call can hide a step by its length, never make one. (Taken
// after the answer, a fake clock moved by a test while a call was under
// way read as a step.)
type Forward struct {
	mono func() time.Duration
	mu   sync.Mutex
	last time.Time
	at   time.Duration
	seen bool
}

// NewForward returns a Forward timed by mono (clock.MonotonicOf the
// store's clock); with a nil mono it never expects anything.
func NewForward(mono func() time.Duration) *Forward {
	return &Forward{mono: mono}
}

// Mono returns the monotonic reading to give Saw with a reading of the
// clock taken after it (0 without a monotonic clock).
func (f *Forward) Mono() time.Duration {
	if f == nil || f.mono == nil {
		return 0
	}
	return f.mono()
}

// Expect returns the earliest the clock can read now, and false when no
// reading was seen yet.
func (f *Forward) Expect() (time.Time, bool) {
	if f == nil || f.mono == nil {
		return time.Time{}, false
	}
	now := f.mono()
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.seen {
		return time.Time{}, false
	}
	return f.last.Add(now - f.at), true
}

// Saw records a reading of the clock taken at or after the monotonic
// reading at (Mono).
func (f *Forward) Saw(reading time.Time, at time.Duration) {
	if f == nil || f.mono == nil || reading.IsZero() {
		return
	}
	f.mu.Lock()
	f.last, f.at, f.seen = reading.Round(0), at, true
	f.mu.Unlock()
}
