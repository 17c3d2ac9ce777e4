package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/internal/config"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/relay"
	"github.com/backstophq/backstop/store"
)

// fanOut is the transport of the topic destination: a message written to
// it (by the library or with plain SQL) names its topic in its type, and is
// "delivered" by writing one copy per routed destination, each then with
// its own attempts, order, breaker and dead letters. The copies are written
// under the idempotency key fanout:<id>, so a message delivered twice (at
// least once) is fanned out once.
type fanOut struct {
	adm   store.Admin
	route func(topic string) []string
}

// addFanOut adds the topic destination to rc when the config has routes.
func addFanOut(rc *relay.Config, c *config.Config, st store.Store) error {
	if len(c.Routes) == 0 {
		return nil
	}
	adm, ok := st.(store.Admin)
	if !ok {
		return errors.New("routes need a store that implements store.Admin")
	}
	rc.Destinations[config.TopicDestination] = relay.Destination{Transport: &fanOut{adm: adm, route: c.RouteTopic}}
	return nil
}

func (f *fanOut) Deliver(ctx context.Context, m *outbox.Message) error {
	dests := f.route(m.Type)
	if len(dests) == 0 {
		return errorhandling.WithReason(errorhandling.Permanent(fmt.Errorf("no route matches topic %q", m.Type)), errorhandling.ReasonValidationFailure)
	}
	copies := make([]*outbox.Message, len(dests))
	for i, d := range dests {
		copies[i] = &outbox.Message{Destination: d, Stream: m.Stream, Type: m.Type, Payload: m.Payload,
			Headers: m.Headers, Ordering: m.Ordering}
	}
	_, _, err := f.adm.EnqueueIdempotent(ctx, "fanout:"+m.ID.String(), copies...)
	if errors.Is(err, outbox.ErrInvalidMessage) {
		return errorhandling.WithReason(errorhandling.Permanent(err), errorhandling.ReasonValidationFailure)
	}
	if err != nil {
		return errorhandling.Transient(fmt.Errorf("fan out topic %q: %w", m.Type, err))
	}
	return nil
}

func (f *fanOut) Close() error { return nil }
