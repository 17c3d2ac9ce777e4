package relay

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/backstophq/backstop/circuitbreaker"
)

// A destination's circuit has two parts. Its circuitbreaker counts the
// faults blamed on the destination and trips; from then on the relay's
// gate decides when to try the destination again. While the circuit is
// open the claimer does not claim for the destination; the gate lets one
// probe claim through (of at most HalfOpenMaxRequests messages) after
// Destination.FirstProbe (1 s), then after twice as long each time a
// probe fails, up to Destination.MaxProbeInterval (5 s). So delivery
// resumes within MaxProbeInterval of the destination coming back, however
// long it was down, at the cost of one probe message per interval. When HalfOpenMaxRequests probes have succeeded
// the circuit closes (the breaker is Reset) and claiming resumes.
//
// A Retry-After hint on a fault blamed on the destination (a 429 or 503
// with the header) pauses the whole destination until then: nothing is
// claimed for it meanwhile, and DestinationStats.PausedUntil shows it.

// Defaults of Destination.FirstProbe and MaxProbeInterval.
const (
	DefaultFirstProbe       = time.Second
	DefaultMaxProbeInterval = 5 * time.Second
)

// breakerNeverHalfOpens is the Timeout given to each destination's
// circuitbreaker: the gate, not the breaker's own timer, decides when to
// probe.
const breakerNeverHalfOpens = time.Duration(math.MaxInt64 / 4)

// gate is the relay's side of a destination's circuit.
type gate struct {
	mu          sync.Mutex
	open        bool
	nextProbe   time.Time     // when the next probe may be claimed
	backoff     time.Duration // the wait before the probe after nextProbe's
	probes      int           // probe messages in flight
	successes   int           // probes that succeeded since the last failure
	pausedUntil time.Time     // a Retry-After pause of the whole destination
	fleetPause  time.Time     // the fleet's pause, as the last reading of the circuits found it
	changes     uint64        // how many times the circuit opened or closed here
}

// trip opens the circuit at now, unless it is open already, and reports
// whether it did.
func (d *destination) trip(now time.Time) bool {
	g := &d.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open {
		return false
	}
	d.openLocked(now)
	return true
}

// openLocked opens the circuit at now; g.mu is held.
func (d *destination) openLocked(now time.Time) {
	g := &d.gate
	g.open = true
	g.changes++
	g.backoff = d.firstProbe
	g.nextProbe = now.Add(g.backoff)
	g.successes = 0
}

// closeLocked closes the circuit; g.mu is held. The caller then calls
// gateClosed.
func (d *destination) closeLocked() {
	g := &d.gate
	g.open = false
	g.changes++
	g.successes = 0
}

// match opens or closes d's circuit as a reading of the shared circuits
// found it, unless it stands so already or opened or closed here since
// seen (d.changes before the reading): the reading does not hold that
// change, whose store call is queued. It reports whether it changed the
// circuit.
func (d *destination) match(open bool, now time.Time, seen uint64) bool {
	g := &d.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.changes != seen || g.open == open {
		return false
	}
	if open {
		d.openLocked(now)
	} else {
		d.closeLocked()
	}
	return true
}

// isOpen reports whether the destination's circuit is open.
func (d *destination) isOpen() bool {
	d.gate.mu.Lock()
	defer d.gate.mu.Unlock()
	return d.gate.open
}

// changes is how many times d's circuit opened or closed on this relay.
func (d *destination) changes() uint64 {
	d.gate.mu.Lock()
	defer d.gate.mu.Unlock()
	return d.gate.changes
}

// probing is the number of probe messages in flight.
func (d *destination) probing() int {
	d.gate.mu.Lock()
	defer d.gate.mu.Unlock()
	return d.gate.probes
}

// probeClaimed accounts for a probe claim made at now that got n
// messages. A claim that found nothing puts the next one off by the
// current back-off, without growing it.
func (d *destination) probeClaimed(now time.Time, n int) {
	g := &d.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	g.probes += n
	if n == 0 {
		g.nextProbe = now.Add(g.backoff)
	}
}

// probeDone ends a probe's flight.
func (d *destination) probeDone() {
	g := &d.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.probes > 0 {
		g.probes--
	}
}

// probeResult records the end of a probe delivery at now: ok when the
// destination answered (the message may still be at fault), not ok when
// the fault was the destination's.
func (r *Relay) probeResult(d *destination, now time.Time, ok bool) {
	g := &d.gate
	g.mu.Lock()
	if !g.open {
		g.mu.Unlock()
		return
	}
	if !ok {
		g.successes = 0
		g.backoff = min(2*g.backoff, d.maxProbe)
		g.nextProbe = now.Add(g.backoff)
		g.mu.Unlock()
		d.stats.trips.Add(1)
		r.log.LogAttrs(context.Background(), slog.LevelWarn, "destination still down after a probe",
			slog.String("destination", d.name), slog.Duration("next_probe_in", g.backoff))
		return
	}
	g.successes++
	closed := g.successes >= d.halfOpenMax
	g.mu.Unlock()
	if closed {
		r.closeGate(d, "destination recovered; circuit closed")
		r.fleetClosed(d)
	}
}

// closeGate closes d's circuit: the breaker is reset and claiming for d
// resumes.
func (r *Relay) closeGate(d *destination, why string) {
	g := &d.gate
	g.mu.Lock()
	if !g.open {
		g.mu.Unlock()
		return
	}
	d.closeLocked()
	g.mu.Unlock()
	r.gateClosed(d, why)
}

// gateClosed resets d's breaker, now that its circuit closed, and resumes
// claiming for d.
func (r *Relay) gateClosed(d *destination, why string) {
	d.breaker.Reset()
	if t, ok := r.trackers.Lookup(d.name); ok {
		t.Success()
	}
	r.log.LogAttrs(context.Background(), slog.LevelInfo, why, slog.String("destination", d.name))
	r.wake()
}

// breakerReset closes d's circuit, for this relay and the fleet, when its
// breaker was reset while the gate was open (an operator's Reset through
// Breaker).
func (r *Relay) breakerReset(d *destination) {
	if !d.isOpen() {
		return
	}
	r.closeGate(d, "circuit reset; deliveries resume")
	r.fleetClosed(d)
}

// probeDueNow makes d's next probe due at now (the shared circuit says one
// is due).
func (d *destination) probeDueNow(now time.Time) {
	g := &d.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open && g.nextProbe.After(now) {
		g.nextProbe = now
	}
}

// probeLater puts d's next probe attempt off by wait.
func (d *destination) probeLater(now time.Time, wait time.Duration) {
	g := &d.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	g.nextProbe = now.Add(wait)
}

// pause holds every delivery to the destination until until.
func (d *destination) pause(until time.Time) {
	d.setPause(until)
}

func (d *destination) setPause(until time.Time) {
	g := &d.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	if until.After(g.pausedUntil) {
		g.pausedUntil = until
	}
}

// pauseEnd is the end of the pause holding the destination at now, the
// relay's own or the fleet's; zero when none does. g.mu must be held. The
// relay never pauses a destination further ahead than maxRetryAfter: a
// pause of its own ending later than that was set before the clock was
// stepped back, and is dropped, as the store drops such a pause for the
// fleet (store.MaxPause). Kept, it held the destination for as long as the
// step.
func (g *gate) pauseEnd(now time.Time) time.Time {
	if g.pausedUntil.Sub(now) > maxRetryAfter {
		g.pausedUntil = time.Time{}
	}
	end := g.pausedUntil
	if g.fleetPause.After(end) {
		end = g.fleetPause
	}
	if !end.After(now) {
		return time.Time{}
	}
	return end
}

// pausedUntil is the end of the destination's Retry-After pause; zero
// when it is not paused.
func (d *destination) pausedUntil(now time.Time) time.Time {
	d.gate.mu.Lock()
	defer d.gate.mu.Unlock()
	return d.gate.pauseEnd(now)
}

// fleetPaused sets the fleet's pause of d from a reading of the circuits
// at now: until the next reading when the fleet pauses d, none when it
// does not. It replaces the last reading's: the store decides whether a
// pause holds, a clock stepped back included.
func (d *destination) fleetPaused(now time.Time, paused bool, next time.Duration) {
	g := &d.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	g.fleetPause = time.Time{}
	if paused {
		g.fleetPause = now.Add(next)
	}
}

// probeTime is when the destination's next probe may be claimed, as of
// now; g.mu must be held. The relay never puts a probe further off than
// its longest probe interval: a probe time further ahead than that was set
// before the clock was stepped back, and is due now. Kept, it held the
// circuit open without a probe for as long as the step, whatever the
// destination did meanwhile.
func (d *destination) probeTime(now time.Time) time.Time {
	g := &d.gate
	if g.nextProbe.Sub(now) > max(d.maxProbe, d.firstProbe) {
		g.nextProbe = now
	}
	return g.nextProbe
}

// untilProbeAt is how long after now the destination's circuit lets a
// probe claim through; zero when it is not open.
func (d *destination) untilProbeAt(now time.Time) time.Duration {
	g := &d.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.open {
		return 0
	}
	return max(d.probeTime(now).Sub(now), 0)
}

// state is the destination's circuit as the breaker_state gauge and
// DestinationStats report it.
func (d *destination) state(now time.Time) circuitbreaker.State {
	g := &d.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case !g.open:
		return d.breaker.State()
	case g.probes > 0 || !now.Before(d.probeTime(now)):
		return circuitbreaker.StateHalfOpen
	}
	return circuitbreaker.StateOpen
}

// breakerPlan returns the destinations not to claim for (circuit open or
// paused) and those due for a probe claim.
func (l *loop) breakerPlan(now time.Time) (exclude []string, probes []*destination) {
	for _, d := range l.r.destList {
		g := &d.gate
		g.mu.Lock()
		paused := !g.pauseEnd(now).IsZero()
		switch {
		case g.open:
			exclude = append(exclude, d.name)
			if !paused && !now.Before(d.probeTime(now)) && g.probes < d.halfOpenMax {
				probes = append(probes, d)
			}
		case paused:
			exclude = append(exclude, d.name)
		}
		g.mu.Unlock()
	}
	return exclude, probes
}

// closedDestinations lists the configured destinations not in exclude.
func (l *loop) closedDestinations(exclude []string) []string {
	out := make([]string, 0, len(l.r.destList))
next:
	for _, d := range l.r.destList {
		for _, x := range exclude {
			if x == d.name {
				continue next
			}
		}
		out = append(out, d.name)
	}
	return out
}

// untilProbe is the time left before the first open circuit lets a probe
// through or the first pause ends.
func (l *loop) untilProbe() time.Duration {
	d := time.Duration(math.MaxInt64)
	now := l.r.clk.Now()
	for _, dest := range l.r.destList {
		g := &dest.gate
		g.mu.Lock()
		switch end := g.pauseEnd(now); {
		case !end.IsZero():
			d = min(d, end.Sub(now))
		case g.open && g.probes < dest.halfOpenMax:
			d = min(d, max(dest.probeTime(now).Sub(now), 0))
		}
		g.mu.Unlock()
	}
	return d
}
