package natstransport_test

import (
	"io"
	"log/slog"
	"testing"
	"time"

	natstransport "github.com/backstophq/backstop/transport/nats"
	"github.com/backstophq/backstop/transport/transporttest"
)

// TestSilentServerAtNewIsDialedOnce: a server that takes the connection and
// says nothing (a host dropping packets, a proxy with no server behind it)
// is unreachable: New returns a Transport that connects in the background.
// It dialed that server twice before returning, each dial waiting out
// Config.Timeout (the first to learn it is unreachable, then nats.Connect's
// first pass of the background connection): New took twice the timeout,
// a minute by default for each such destination at serve's start.
func TestSilentServerAtNewIsDialedOnce(t *testing.T) {
	t.Parallel()
	silent := transporttest.NewSilent(t, nil)
	const timeout = 500 * time.Millisecond
	start := time.Now()
	tr, err := natstransport.New(natstransport.Config{URL: "nats://" + silent.Addr, Timeout: timeout,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	took := time.Since(start)
	dialed := silent.Accepted()
	if err != nil {
		t.Fatalf("New with a silent server = %v, want a Transport that connects in the background", err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	if dialed != 1 {
		t.Errorf("New dialed the silent server %d times before returning (in %v), want once", dialed, took)
	}
}
