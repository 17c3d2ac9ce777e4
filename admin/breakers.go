package admin

import (
	"slices"

	"github.com/backstophq/backstop/relay"
)

// RelayBreakers reports r's destinations for Config.Breakers, by name:
// each one's circuit and counts, how many of its messages r holds claimed
// and not yet recorded, and the end of a Retry-After pause while one holds.
// The dashboard's overview shows these without reading the outbox.
func RelayBreakers(r *relay.Relay) func() []Breaker {
	return func() []Breaker {
		s := r.Stats()
		names := make([]string, 0, len(s.Destinations))
		for name := range s.Destinations {
			names = append(names, name)
		}
		slices.Sort(names)
		out := make([]Breaker, 0, len(names))
		for _, name := range names {
			d := s.Destinations[name]
			b := Breaker{Destination: name, State: d.Breaker.String(), Openings: d.BreakerTrips,
				Delivered: d.Delivered, Released: d.Released, Failed: d.Failed,
				DeadLettered: &d.DeadLettered, InFlight: &d.InFlight}
			if !d.PausedUntil.IsZero() {
				b.PausedUntil = &d.PausedUntil
			}
			out = append(out, b)
		}
		return out
	}
}
