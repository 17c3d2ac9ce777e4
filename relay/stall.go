package relay

import (
	"sync"
	"time"

	"github.com/backstophq/backstop/clock"
)

// A relay that is paused (SIGSTOP, a VM stall or suspend, a long GC) must
// not blame its destinations for the deliveries whose deadlines passed
// while it was not running. The stall detector ticks every stallTick; a
// tick that comes more than stallThreshold late (stallGap) marks the time
// between the two ticks as a stall, and a failed delivery attempt that
// overlaps one is given back
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
		if gap := stallGap(last, now); gap > stallTick+stallThreshold {
			r.stalls.add(last, now)
			r.stats.stalls.Add(1)
			r.log.Warn("the relay was stalled (or its host suspended, or its clock stepped forward); deliveries that failed meanwhile are not blamed on their destinations",
				"stalled_for", gap.Round(time.Millisecond).String())
		}
		last = now
	}
}

// stallGap is the time between two of the watchdog's readings: the
// larger of their monotonic and wall gaps. Linux's monotonic clock, on
// which the watchdog's timer runs, does not count a suspend of the host
// (a VM suspended, a laptop's lid closed); the wall clock is set again on
// resume. Read on the monotonic clock alone a suspend of minutes was no
// stall, and the deliveries that failed across it (their connections
// closed by the receivers meanwhile) were charged and counted by the
// breakers, enough of them to open a healthy destination's circuit for
// the fleet. A wall clock stepped forward reads as a stall too: a
// delivery that failed across it is given back uncharged.
func stallGap(last, now time.Time) time.Duration {
	return max(now.Sub(last), now.Round(0).Sub(last.Round(0)))
}
