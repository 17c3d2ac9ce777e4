package relay

import (
	"math"
	"sync"
	"time"
)

// MinRatePerSecond is the lowest RateLimit.PerSecond New accepts: one a
// day. Much lower, the interval between deliveries overflows a
// time.Duration.
const MinRatePerSecond = 1.0 / 86400

// RateLimit caps how many deliveries to a destination a relay starts: a
// token bucket filled with PerSecond tokens a second, holding at most
// Burst. Each delivery attempt, and each in-process retry within one,
// takes a token.
//
// With a store.FleetCounter store (both of Backstop's), the relays of a
// fleet divide the limit among the instances alive: each starts
// PerSecond/N a second with a burst of Burst/N (at least 1), N read at
// every heart-beat, so that the fleet as a whole keeps to the limit while
// relays come and go (a relay that stops leaves the fleet, with a
// store.FleetLeaver store, and the others take its share back at their
// next heart-beat; one that dies leaves its share unused for up to the
// store's InstanceTimeout). A relay alone (NoFleet, or a store that counts
// no instances) keeps the whole limit.
//
// A message waiting for its token waits in the relay's scheduler, leased
// (its lease renewed) but holding no worker, with its delivery timeout not
// yet running, no attempt charged and nothing counted by the breaker. An
// in-process retry (Destination.InProcess) that finds no token ends the
// attempt with the error of its last try, as if the retries had run out.
// The relay leases for a rate-limited destination about what the limit
// lets it start within one LeaseDuration (Burst + PerSecond ×
// LeaseDuration), so that it does not hoard messages other relays of a
// fleet could deliver.
type RateLimit struct {
	// PerSecond is the most deliveries started per second, on average.
	// It must be finite and at least MinRatePerSecond (one a day).
	PerSecond float64
	// Burst is how many deliveries may start at once after the
	// destination was idle. Zero means 1.
	Burst int
}

// limiter is a RateLimit's token bucket on the relay's clock. Tokens are
// taken when due, never booked ahead. With a fleet, the relay's share of
// the limit is the limit divided by the instances alive (share).
type limiter struct {
	rl RateLimit // the destination's, for the whole fleet

	mu       sync.Mutex
	share    int           // the instances alive that divide the limit, at least 1
	burst    int           // this relay's: rl.Burst / share, at least 1
	rate     float64       // this relay's tokens a second: rl.PerSecond / share
	interval time.Duration // between tokens
	full     time.Duration // burst-1 intervals: how far next may lag now
	next     time.Time     // when the next token is due; in the past while the bucket holds more
	seen     time.Time     // the latest reading of the clock
}

func newLimiter(rl *RateLimit) *limiter {
	if rl == nil {
		return nil
	}
	l := &limiter{rl: *rl}
	l.divide(1)
	return l
}

// divide makes l this relay's share of the limit among n relays; l.mu is
// held, or l not yet shared.
func (l *limiter) divide(n int) {
	n = max(n, 1)
	l.share = n
	l.burst = max(l.rl.Burst/n, 1)
	l.rate = l.rl.PerSecond / float64(n)
	// At least 1ns: over a billion a second the interval rounded down to
	// zero, and the division below panicked (serve crashed at its start
	// on rate_limit.per_second: 2e9, which config check took).
	l.interval = max(time.Duration(min(float64(time.Second)/l.rate, math.MaxInt64/2)), 1)
	l.full = time.Duration(math.MaxInt64)
	if b := int64(l.burst - 1); b < int64(math.MaxInt64/l.interval) {
		l.full = time.Duration(b) * l.interval
	}
}

// setShare divides the limit among n relays alive (n below 1 counts as
// 1), and reports whether the share changed. A token already due stays
// due; the next ones come at the new pace.
func (l *limiter) setShare(n int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if max(n, 1) == l.share {
		return false
	}
	l.divide(n)
	return true
}

// take takes a token when one is due at now, returning 0, and otherwise
// returns how long until one is.
func (l *limiter) take(now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if d := l.due(now); d > 0 {
		return d
	}
	l.next = l.next.Add(l.interval)
	return 0
}

// wait returns how long until a token is due at now, taking none.
func (l *limiter) wait(now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.due(now)
}

// due brings the bucket to now and returns how long until a token is due;
// l.mu is held.
func (l *limiter) due(now time.Time) time.Duration {
	if now.Before(l.seen) {
		// The clock was stepped back: the schedule moves with it, so
		// that the step neither holds deliveries for its length nor
		// frees tokens the limit did not allow. (The wall clock's
		// monotonic reading never goes back; other clocks may.)
		l.next = l.next.Add(now.Sub(l.seen))
	}
	l.seen = now
	// A bucket left idle fills to burst tokens, and no more: a clock
	// stepped forward a day is an idle day.
	if now.Sub(l.next) > l.full {
		l.next = now.Add(-l.full)
	}
	return max(l.next.Sub(now), 0)
}

// reached tells l that the clock's timers have run to at: a clock read
// earlier afterwards was stepped back from at least there. Without it, a
// step back found long after the last reading would be taken for a step
// that short, and hold the next token for the time between.
func (l *limiter) reached(at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if at.After(l.seen) {
		l.seen = at
	}
}

// leased is how many messages of its destination the relay should hold:
// what the limit lets it start within lease.
func (l *limiter) leased(lease time.Duration) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := float64(l.burst) + math.Ceil(l.rate*lease.Seconds())
	return int(min(n, math.MaxInt32))
}

// alarm wakes a scheduler's workers when the first token of a destination
// held by its RateLimit comes due. Guarded by the scheduler's mutex.
type alarm struct {
	at   time.Time     // when it rings; zero: not set
	quit chan struct{} // closed to stop the timer of the alarm set
}

// set makes the alarm ring in d from now, unless it rings sooner already.
// A clock stepped back makes at earlier than the alarm set before the
// step, which is then replaced: the step holds no delivery.
func (a *alarm) set(s *scheduler, now time.Time, d time.Duration) {
	at := now.Add(d)
	if !a.at.IsZero() && !a.at.After(at) {
		return
	}
	a.stop()
	quit := make(chan struct{})
	a.at, a.quit = at, quit
	t := s.clk.NewTimer(d)
	go func() {
		select {
		case <-t.C():
		case <-quit:
			t.Stop()
			return
		}
		s.mu.Lock()
		if a.quit == quit {
			a.at, a.quit = time.Time{}, nil
		}
		for _, d := range s.dests {
			if d.limit != nil {
				d.limit.reached(at)
			}
		}
		s.mu.Unlock()
		s.cond.Broadcast()
	}()
}

// stop stops the alarm set, if any.
func (a *alarm) stop() {
	if a.quit != nil {
		close(a.quit)
	}
	a.at, a.quit = time.Time{}, nil
}
