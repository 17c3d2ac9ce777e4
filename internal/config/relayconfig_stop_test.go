package config

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/backstophq/backstop/transport/transporttest"
)

// TestRelayConfigStopsDialingWhenItsContextEnds: serve makes its
// destinations' transports one after another, and a NATS one whose server
// takes the connection and says nothing holds its start for the
// destination's timeout. A SIGTERM then (serve's context cancelled) was
// ignored until every destination had waited its turn: RelayConfig took
// its context and never looked at it. It stops after the transport being
// dialed, and says why.
func TestRelayConfigStopsDialingWhenItsContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// SIGTERM while the first transport dials.
	silent := transporttest.NewSilent(t, cancel)
	var y strings.Builder
	y.WriteString("destinations:\n")
	for i := range 4 {
		fmt.Fprintf(&y, "  - {name: d%d, type: nats, url: 'nats://%s', timeout: 300ms}\n", i, silent.Addr)
	}
	c, err := Parse([]byte(y.String()), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	_, trs, err := c.RelayConfig(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for _, tr := range trs {
		_ = tr.Close()
	}
	dialed := silent.Accepted()
	if !errors.Is(err, context.Canceled) {
		t.Errorf("RelayConfig with its context cancelled = %v, want context.Canceled", err)
	}
	if dialed > 2 {
		t.Errorf("RelayConfig dialed the silent server %d times after its context was cancelled at the first, want it to stop after that transport", dialed)
	}
}
