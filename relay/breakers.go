package relay

import (
	"math"
	"time"

	"github.com/backstophq/backstop/circuitbreaker"
)

// The loop consults the destinations' breakers before each claim: an open
// breaker's destination is not claimed for; a half-open one's gets a probe
// claim of its own, of at most HalfOpenMaxRequests messages, whose outcome
// closes or re-opens the breaker.

// breakerPlan returns the destinations not to claim for (breaker open or
// half-open) and the half-open ones that may take a probe.
func (l *loop) breakerPlan() (exclude []string, probes []*destination) {
	for _, d := range l.r.destList {
		switch d.breaker.State() {
		case circuitbreaker.StateOpen:
			exclude = append(exclude, d.name)
		case circuitbreaker.StateHalfOpen:
			exclude = append(exclude, d.name)
			if d.probes < d.halfOpenMax {
				probes = append(probes, d)
			}
		}
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

// untilHalfOpen is the time left before the first open breaker lets a
// probe through.
func (l *loop) untilHalfOpen() time.Duration {
	d := time.Duration(math.MaxInt64)
	now := l.r.clk.Now()
	for _, dest := range l.r.destList {
		if st := dest.breaker.GetStats(); st.State == circuitbreaker.StateOpen {
			d = min(d, max(st.OpenUntil.Sub(now), 0))
		}
	}
	return d
}
