package relay

import (
	"sync"
	"time"

	"github.com/backstophq/backstop/clock"
)

// A relay that is paused (SIGSTOP, a VM stall, a long GC) must not blame
// its destinations for the deliveries whose deadlines passed while it was
// not running. The stall detector ticks every stallTick; a tick that comes
// more than stallThreshold late marks the time between the two ticks as a
// stall, and a failed delivery attempt that overlaps one is given back
// without counting against the destination's breaker or charging the
// message. (Messages whose lease lapsed meanwhile are not started at all:
// see flights.startable.)
const (
	stallTick      = 250 * time.Millisecond
	stallThreshold = 2 * time.Second
	stallsKept     = 16
)

// stalls are the stalls the relay detected, the latest stallsKept.
type stalls struct {
	mu      sync.Mutex
	windows [][2]time.Time
}

// add records a stall from from to to.
func (s *stalls) add(from, to time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.windows = append(s.windows, [2]time.Time{from, to})
	if len(s.windows) > stallsKept {
		s.windows = append(s.windows[:0:0], s.windows[len(s.windows)-stallsKept:]...)
	}
}

// overlaps reports whether a stall overlapped the time from start to end.
func (s *stalls) overlaps(start, end time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.windows {
		if w[0].Before(end) && w[1].After(start) {
			return true
		}
	}
	return false
}

// watchStalls runs the stall detector until stop is closed. It runs only
// on the wall clock: on a fake clock a test moves time in steps on
// purpose, and says itself when the relay stalled.
func (r *Relay) watchStalls(stop <-chan struct{}) {
	if r.clk != clock.Real {
		return
	}
	last := r.clk.Now()
	for {
		t := r.clk.NewTimer(stallTick)
		select {
		case <-stop:
			t.Stop()
			return
		case <-t.C():
		}
		now := r.clk.Now()
		if gap := now.Sub(last); gap > stallTick+stallThreshold {
			r.stalls.add(last, now)
			r.stats.stalls.Add(1)
			r.log.Warn("the relay was stalled; deliveries that failed meanwhile are not blamed on their destinations",
				"stalled_for", gap.Round(time.Millisecond).String())
		}
		last = now
	}
}
