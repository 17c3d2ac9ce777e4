// Package clock is the seam through which Backstop reads time.
//
// Every engine in Backstop (retry executors, circuit breakers, trackers, the
// relay) takes a Clock. Production code uses Real; tests use a Fake, which
// only moves when the test says so, so that no test has to sleep to see a
// back-off elapse.
package clock

import "time"

// Clock tells the time and makes timers.
//
// Implementations must be safe for concurrent use.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a timer that fires once, d after now. A timer for
	// d <= 0 fires at once.
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer, the subset of *time.Timer Backstop needs.
type Timer interface {
	// C delivers the time once when the timer fires.
	C() <-chan time.Time
	// Stop prevents the timer from firing. It reports whether it stopped
	// the timer before it fired.
	Stop() bool
}

// Real is the wall clock.
var Real Clock = realClock{}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time { return r.t.C }
func (r realTimer) Stop() bool          { return r.t.Stop() }

// OrReal returns c, or Real when c is nil. Config normalisation uses it so
// that a zero Config field means the wall clock.
func OrReal(c Clock) Clock {
	if c == nil {
		return Real
	}
	return c
}

// Monotonic is a Clock that also tells how much time passed, whatever
// its reading was stepped by (Fake does).
type Monotonic interface {
	Monotonic() time.Duration
}

// processStart is the origin of the process's monotonic readings.
var processStart = time.Now()

// MonotonicOf returns the monotonic reading that goes with c: the
// process's for nil or Real, c's own when it is a Monotonic, and nil for
// any other Clock, whose steps nothing can tell from time passing.
func MonotonicOf(c Clock) func() time.Duration {
	switch c := c.(type) {
	case nil, realClock:
		return func() time.Duration { return time.Since(processStart) }
	case Monotonic:
		return c.Monotonic
	}
	return nil
}

// Sleep waits for d on c, or until done is closed. It reports whether the
// full duration elapsed.
func Sleep(c Clock, d time.Duration, done <-chan struct{}) bool {
	if d <= 0 {
		return true
	}
	t := c.NewTimer(d)
	select {
	case <-t.C():
		return true
	case <-done:
		t.Stop()
		return false
	}
}
