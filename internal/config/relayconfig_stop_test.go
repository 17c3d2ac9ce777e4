package config

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
)

// TestRelayConfigStopsDialingWhenItsContextEnds: serve makes its
// destinations' transports one after another, and a NATS one whose server
// takes the connection and says nothing holds its start for the
// destination's timeout. A SIGTERM then (serve's context cancelled) was
// ignored until every destination had waited its turn: RelayConfig took
// its context and never looked at it. It stops after the transport being
// dialed, and says why.
func TestRelayConfigStopsDialingWhenItsContextEnds(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		mu       sync.Mutex
		accepted int
		conns    []net.Conn
	)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			accepted++
			conns = append(conns, c) // held open, silent
			mu.Unlock()
			cancel() // SIGTERM while the first transport dials
		}
	}()
	defer func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	var y strings.Builder
	y.WriteString("destinations:\n")
	for i := range 4 {
		fmt.Fprintf(&y, "  - {name: d%d, type: nats, url: 'nats://%s', timeout: 300ms}\n", i, ln.Addr())
	}
	c, err := Parse([]byte(y.String()), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	_, trs, err := c.RelayConfig(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for _, tr := range trs {
		_ = tr.Close()
	}
	mu.Lock()
	dialed := accepted
	mu.Unlock()
	if !errors.Is(err, context.Canceled) {
		t.Errorf("RelayConfig with its context cancelled = %v, want context.Canceled", err)
	}
	if dialed > 2 {
		t.Errorf("RelayConfig dialed the silent server %d times after its context was cancelled at the first, want it to stop after that transport", dialed)
	}
}
