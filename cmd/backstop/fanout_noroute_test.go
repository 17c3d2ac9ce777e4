package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/internal/config"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/transport"
)

// TestTopicOnlyANewerRouteMatchesIsLeftToIt: during a rolling deploy of
// serve under relay.unknown_destinations: ignore, an instance of the older
// config claims a topic message that only the newer config routes. It
// leaves the message to an instance whose routes match it (given back,
// uncharged) instead of dead-lettering it, until the message has waited
// noRouteWait; then it dead-letters it, naming the topic. Under
// dead_letter, the default, it dead-letters at once.
func TestTopicOnlyANewerRouteMatchesIsLeftToIt(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	none := func(string) []string { return nil }
	fresh := &outbox.Message{Destination: config.TopicDestination, Type: "order.refunded", CreatedAt: clk.Now().Add(-time.Minute)}
	stale := &outbox.Message{Destination: config.TopicDestination, Type: "order.refunded", CreatedAt: clk.Now().Add(-noRouteWait)}

	old := &fanOut{route: none, leave: true, clk: clk, log: quiet}
	err := old.Deliver(context.Background(), fresh)
	if after, ok := transport.ElsewhereAfter(err); !ok || after <= 0 || !strings.Contains(err.Error(), `"order.refunded"`) {
		t.Fatalf("a topic no route here matches, written a minute ago: %v; want it left to another instance (transport.Elsewhere)", err)
	}
	for name, f := range map[string]*fanOut{
		"waited noRouteWait":    old,
		"unknown dead-lettered": {route: none},
	} {
		m := stale
		if name == "unknown dead-lettered" {
			m = fresh
		}
		err := f.Deliver(context.Background(), m)
		if reason, _ := errorhandling.ReasonOf(err); errors.Is(err, transport.ErrElsewhere) || !errorhandling.IsPermanent(err) ||
			reason != errorhandling.ReasonValidationFailure || !strings.Contains(err.Error(), `no route matches topic "order.refunded"`) {
			t.Errorf("%s: %v; want a permanent ValidationFailure naming the topic", name, err)
		}
	}
}
