package main

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/internal/config"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/relay"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/transport"
)

// fanOut is the transport of the topic destination: a message written to
// it (by the library or with plain SQL) names its topic in its type, and is
// "delivered" by writing one copy per routed destination, each then with
// its own attempts, order, breaker and dead letters. The copies are written
// under the idempotency key fanout:<id>, so a message delivered twice (at
// least once) is fanned out once. Keys beginning with fanout: are the
// fan-out's own (the admin API refuses them); each copy's id is derived
// from the topic message's and its destination (copyID), so that a key
// found taken can be told apart: taken by this fan-out before, the message
// was fanned out; taken by another writer, the message is dead-lettered,
// never counted as delivered with no copy written.
//
// A topic no route matches is dead-lettered at once, unless leave is set
// (relay.unknown_destinations: ignore, a fleet whose instances may run
// different configs during a rolling deploy): then the message is left to
// an instance whose routes match it, given back uncharged every
// noRouteRetry with a warning once per topic, until it has waited
// noRouteWait since it was written.
type fanOut struct {
	adm   store.Admin
	route func(topic string) []string
	leave bool
	clk   clock.Clock
	log   *slog.Logger

	mu     sync.Mutex
	warned map[string]bool // topics warned about, at most maxNoRouteWarnings
}

// How long a topic message no route here matches is left to other
// instances, how often it is given back meanwhile, and how many topics
// an instance warns about (topics are the writers' to choose).
const (
	noRouteWait        = time.Hour
	noRouteRetry       = 10 * time.Second
	maxNoRouteWarnings = 100
)

// addFanOut adds the topic destination to rc when the config has routes.
func addFanOut(rc *relay.Config, c *config.Config, st store.Store) error {
	if len(c.Routes) == 0 {
		return nil
	}
	adm, ok := st.(store.Admin)
	if !ok {
		return errors.New("routes need a store that implements store.Admin")
	}
	rc.Destinations[config.TopicDestination] = relay.Destination{Transport: &fanOut{
		adm: adm, route: c.RouteTopic, leave: rc.UnknownDestination == relay.LeaveUnknown,
		clk: clock.OrReal(rc.Clock), log: cmp.Or(rc.Logger, slog.Default()),
	}}
	return nil
}

func (f *fanOut) Deliver(ctx context.Context, m *outbox.Message) error {
	dests := f.route(m.Type)
	if len(dests) == 0 {
		return f.noRoute(ctx, m)
	}
	copies := make([]*outbox.Message, len(dests))
	mine := make(map[uuid.UUID]bool, len(dests))
	for i, d := range dests {
		copies[i] = &outbox.Message{ID: copyID(m.ID, d), Destination: d, Stream: m.Stream, Type: m.Type,
			Payload: m.Payload, Headers: m.Headers, Ordering: m.Ordering}
		mine[copies[i].ID] = true
	}
	key := store.FanOutKeyPrefix + m.ID.String()
	ids, created, err := f.adm.EnqueueIdempotent(ctx, key, copies...)
	if errors.Is(err, outbox.ErrInvalidMessage) {
		return errorhandling.WithReason(errorhandling.Permanent(err), errorhandling.ReasonValidationFailure)
	}
	if err != nil {
		return errorhandling.Transient(fmt.Errorf("fan out topic %q: %w", m.Type, err))
	}
	if created || slices.ContainsFunc(ids, func(id uuid.UUID) bool { return mine[id] }) {
		return nil // written now, or by an earlier delivery of the message
	}
	return errorhandling.WithReason(errorhandling.Permanent(fmt.Errorf(
		"fan out topic %q: idempotency key %s holds messages another writer wrote (%d), not this fan-out's copies; nothing was written",
		m.Type, key, len(ids))), errorhandling.ReasonValidationFailure)
}

// copyID is the id of topic message topic's copy for destination dest: the
// topic message's id (a UUIDv7, so copies sort with it) with its random
// tail mixed with a hash of dest. Every delivery of the topic message
// derives the same ids, which is how a fan-out recognises its own copies
// behind a key it finds taken.
func copyID(topic uuid.UUID, dest string) uuid.UUID {
	h := sha256.Sum256(append(topic[:], dest...))
	id := topic
	for i := 8; i < 16; i++ {
		id[i] ^= h[i-8]
	}
	id[8] = id[8]&0x3f | 0x80 // RFC 9562 variant
	return id
}

func (f *fanOut) Close() error { return nil }

// noRoute is the outcome of topic message m that no route matches: left
// to another instance (transport.Elsewhere) under leave until it has
// waited noRouteWait, else dead-lettered naming its topic.
func (f *fanOut) noRoute(ctx context.Context, m *outbox.Message) error {
	err := fmt.Errorf("no route matches topic %q", m.Type)
	if !f.leave {
		return errorhandling.WithReason(errorhandling.Permanent(err), errorhandling.ReasonValidationFailure)
	}
	waited := f.clk.Now().Sub(m.CreatedAt)
	if waited >= noRouteWait {
		err = fmt.Errorf("%w, after waiting %s for an instance whose routes match it", err, waited.Round(time.Second))
		return errorhandling.WithReason(errorhandling.Permanent(err), errorhandling.ReasonValidationFailure)
	}
	f.mu.Lock()
	first := !f.warned[m.Type] && len(f.warned) < maxNoRouteWarnings
	if first {
		if f.warned == nil {
			f.warned = map[string]bool{}
		}
		f.warned[m.Type] = true
	}
	f.mu.Unlock()
	level := slog.LevelDebug
	if first {
		level = slog.LevelWarn
	}
	f.log.LogAttrs(ctx, level, "no route here matches the topic: left to an instance whose routes match it (a rolling deploy?); dead-lettered once it has waited an hour",
		slog.String("topic", m.Type), slog.String("message_id", m.ID.String()), slog.Duration("waited", waited))
	return transport.Elsewhere(err, noRouteRetry)
}
