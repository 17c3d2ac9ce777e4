package admin_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstophq/backstop/admin"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/relay"
	"github.com/backstophq/backstop/transport"
)

// TestRelayBreakersReportWhatTheOverviewShows checks that the breakers of a
// relay say how many messages each destination has in flight and how many
// it dead-lettered: the dashboard's overview reads these instead of listing
// up to 1,000 leased messages from the outbox every two seconds (1.5 s a
// read on a large SQLite outbox). Pauses are checked with the relay's Stats
// (relay/flight_test.go); RelayBreakers only passes them on.
func TestRelayBreakersReportWhatTheOverviewShows(t *testing.T) {
	st := openSQLite(t)
	ctx, cancel := context.WithCancel(context.Background())
	started, release := make(chan struct{}, 4), make(chan struct{})
	dead := make(chan struct{}, 1)
	hold := transport.Func(func(ctx context.Context, m *outbox.Message) error {
		if m.Type == "poison" {
			return transport.MessageFault(errors.New("refused"), errorhandling.ReasonValidationFailure, "")
		}
		started <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	rl, err := relay.New(st, relay.Config{
		Destinations: map[string]relay.Destination{"billing": {Transport: hold}, "audit": {Transport: hold}},
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		Metrics:      prometheus.NewRegistry(),
		OnDeadLetter: func(relay.Failure) { dead <- struct{}{} },
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- rl.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && ctx.Err() == nil {
			t.Errorf("relay: %v", err)
		}
	})
	a := newAPI(t, st, func(c *admin.Config) { c.Breakers = admin.RelayBreakers(rl) })
	byName := func() map[string]admin.Breaker {
		t.Helper()
		list, err := a.rd.Breakers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]admin.Breaker{}
		for _, b := range list.Items {
			out[b.Destination] = b
		}
		return out
	}
	count := func(p *int64) string {
		if p == nil {
			return "not reported"
		}
		return strconv.FormatInt(*p, 10)
	}

	enqueue := func(dest, typ string) {
		t.Helper()
		if err := st.Enqueue(ctx, &outbox.Message{Destination: dest, Type: typ, Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	enqueue("billing", "slow")
	enqueue("billing", "slow")
	<-started
	<-started
	got := byName()
	if n := count(got["billing"].InFlight); n != "2" {
		t.Errorf("billing in flight: %s, want 2 (two deliveries held)", n)
	}
	if n := count(got["audit"].InFlight); n != "0" {
		t.Errorf("audit in flight: %s, want 0", n)
	}
	if p := got["billing"].PausedUntil; p != nil {
		t.Errorf("billing paused until %v, want not paused", p)
	}
	close(release)

	enqueue("audit", "poison")
	<-dead
	if n := count(byName()["audit"].DeadLettered); n != "1" {
		t.Errorf("audit dead-lettered: %s, want 1", n)
	}
}
