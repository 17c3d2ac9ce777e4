package natstransport_test

import (
	"context"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop/errorhandling"
	natstransport "github.com/backstophq/backstop/transport/nats"
	"github.com/backstophq/backstop/transport/transporttest"
)

// signalOn is a logger that signals c for each record whose message
// begins with prefix.
type signalOn struct {
	prefix string
	c      chan struct{}
}

func (h signalOn) Enabled(context.Context, slog.Level) bool { return true }
func (h signalOn) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h signalOn) WithGroup(string) slog.Handler            { return h }
func (h signalOn) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, h.prefix) {
		select {
		case h.c <- struct{}{}:
		default:
		}
	}
	return nil
}

// TestServerDownAtNew: a destination whose NATS server cannot be reached
// when the Transport is made (serve's start) no longer fails New, which
// stopped serve; its deliveries fail as transient faults of the
// destination until the server is back, then publish.
func TestServerDownAtNew(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	s, prefix := newStream(t, js, jetstream.StreamConfig{})
	down := transporttest.NewUnreachable(t)
	u, err := url.Parse(natsURL())
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	u.Host = down.Addr
	connected := make(chan struct{}, 1)
	tr, err := natstransport.New(natstransport.Config{URL: u.String(), Subject: prefix + ".{type}", Stream: s.CachedInfo().Config.Name,
		Logger: slog.New(signalOn{prefix: "natstransport: connected", c: connected})})
	if err != nil {
		t.Fatalf("New with the server down = %v, want a Transport that connects later", err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	m := message(t)
	ctx := ctxFor(t)
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err = tr.Deliver(short, m)
	cancel()
	if err == nil {
		t.Fatal("Deliver with the server down = nil")
	}
	if v := errorhandling.NewErrorClassifier().Classify(err); v.Class != errorhandling.ClassTransient || v.Blame != errorhandling.BlameDestination {
		t.Errorf("Deliver with the server down: %v classified %v, %v; want a transient fault of the destination", err, v.Class, v.Blame)
	}

	down.Open(t, target)
	select {
	case <-connected:
	case <-ctx.Done():
		t.Fatal("the Transport never connected once the server was back")
	}
	if err := tr.Deliver(ctx, m); err != nil {
		t.Fatalf("Deliver once the server is back = %v", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Errorf("the stream holds %d messages, want 1", info.State.Msgs)
	}
}
