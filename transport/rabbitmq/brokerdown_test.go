package rabbitmq_test

import (
	"bytes"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/transport/rabbitmq"
	"github.com/backstophq/backstop/transport/transporttest"
)

// TestBrokerDownAtNew: a destination whose broker cannot be reached when
// the Transport is made (serve's start) no longer fails New, which
// stopped serve; its deliveries fail as transient faults of the
// destination until the broker is back, then publish.
func TestBrokerDownAtNew(t *testing.T) {
	t.Parallel()
	a := connect(t)
	ex := a.exchange(unique("bt.ex"))
	q := a.queue(ex, "#", nil)
	_, got := a.readBack(q)
	down := transporttest.NewUnreachable(t)
	u, err := url.Parse(amqpURL())
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	u.Host = down.Addr
	tr, err := rabbitmq.New(rabbitmq.Config{URL: u.String(), Exchange: ex, Timeout: time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("New with the broker down = %v, want a Transport that dials later", err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	m := message(t)
	ctx := ctxFor(t)
	wantFault(t, tr.Deliver(ctx, m), errorhandling.ClassTransient, errorhandling.BlameDestination, "")

	down.Open(t, target)
	if err := tr.Deliver(ctx, m); err != nil {
		t.Fatalf("Deliver once the broker is back = %v", err)
	}
	if d := got.next(t, ctx); d.MessageId != m.ID.String() {
		t.Errorf("the queue got %q, want %s", d.MessageId, m.ID)
	}
}

// TestBrokerDownAtNewWarnsWithoutThePassword: New's warning of a broker it
// cannot reach names the broker, not the URL's password.
func TestBrokerDownAtNewWarnsWithoutThePassword(t *testing.T) {
	t.Parallel()
	var log bytes.Buffer
	tr, err := rabbitmq.New(rabbitmq.Config{URL: "amqp://guest:secret@127.0.0.1:1/", Timeout: time.Second,
		Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatalf("New = %v, want a Transport that dials later", err)
	}
	_ = tr.Close()
	if !strings.Contains(log.String(), "127.0.0.1:1") || strings.Contains(log.String(), "secret") {
		t.Errorf("New logged %q; want the broker named without the password", log.String())
	}
}
