package natstransport_test

import (
	"log/slog"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop/errorhandling"
	natstransport "github.com/backstophq/backstop/transport/nats"
)

// TestConnectionGoneSilentIsDialledAgain: the Transport's connection goes
// quiet both ways (a NAT entry or a load balancer dropped it without a
// reset: writes still succeed into the socket, nothing comes back) while
// the server itself is fine and a new connection works. The Deliver that
// publishes on it times out waiting for the PubAck, a transient fault of
// the destination; the next ones must not wait on that connection again.
// The client notices a dead connection only when MaxPingsOut (2) pings
// at PingInterval (2 min) went unanswered: every Deliver, and every probe
// of the relay's breaker, timed out for minutes.
func TestConnectionGoneSilentIsDialledAgain(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	s, prefix := newStream(t, js, jetstream.StreamConfig{})
	u, err := url.Parse(natsURL())
	if err != nil {
		t.Fatal(err)
	}
	p := newCutProxy(t, u.Host)
	u.Host = p.addr
	reconnected := make(chan struct{}, 1)
	tr := newTransport(t, natstransport.Config{URL: u.String(), Subject: prefix + ".{type}", Timeout: time.Second,
		Logger: slog.New(signals{"natstransport: reconnected": reconnected})})
	ctx := ctxFor(t)
	if err := tr.Deliver(ctx, message(t)); err != nil {
		t.Fatalf("Deliver = %v", err)
	}
	if n := p.silence(); n != 1 {
		t.Fatalf("%d connections through the proxy, want 1", n)
	}
	err = tr.Deliver(ctx, message(t))
	wantFault(t, err, errorhandling.ClassTransient, errorhandling.BlameDestination, "timeout")

	select {
	case <-reconnected:
	case <-ctx.Done():
		t.Fatal("the silent connection was never replaced: every Deliver waits out its Timeout on it")
	}
	for i := range 3 {
		start := time.Now()
		if err := tr.Deliver(ctx, message(t)); err != nil {
			t.Fatalf("Deliver %d after the reconnection, %v later: %v", i+1, time.Since(start).Round(time.Millisecond), err)
		}
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("stream holds %d messages", info.State.Msgs)
}
