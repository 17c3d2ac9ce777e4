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
