package rabbitinbox

import (
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/backstophq/backstop/inbox/internal/inboxtest"
	"github.com/backstophq/backstop/internal/testenv"
)

// TestConsumingSaysWhy: Consuming reports whether the receiver has a
// consumer on its queue, and when it has not, why: not started yet, or
// the error that ended its session (the broker out of reach). serve's
// /readyz shows it for each RabbitMQ source; nothing told an operator or
// an orchestrator that a source had lost its broker.
func TestConsumingSaysWhy(t *testing.T) {
	t.Parallel()
	admin := connect(t)
	u, err := url.Parse(testenv.AMQPURL())
	if err != nil {
		t.Fatal(err)
	}
	e := inboxtest.NewEnv(t, inboxtest.Kinds[0])
	queue, _ := newQueue(t, admin)
	p := inboxtest.NewProxy(t, u.Host)
	via := *u
	via.Host = p.Addr()
	r, err := New(Config{Inbox: e.RecordingInbox(), URL: via.String(), Queue: queue, Logger: inboxtest.Quiet,
		ReconnectDelay: 5 * time.Millisecond, MaxReconnectDelay: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	sessions, retries := make(chan struct{}, 100), make(chan struct{}, 100)
	r.consuming = func() { sessions <- struct{}{} }
	r.reconnecting = func() { retries <- struct{}{} }
	if ok, err := r.Consuming(); ok || !errors.Is(err, errNotStarted) {
		t.Fatalf("Consuming before Run = %v, %v; want false, not started", ok, err)
	}
	e.Go("receiver", r.Run)
	<-sessions
	if ok, err := r.Consuming(); !ok || err != nil {
		t.Fatalf("Consuming while consuming = %v, %v; want true", ok, err)
	}
	p.Refuse()
	<-retries
	if ok, err := r.Consuming(); ok || err == nil || errors.Is(err, errNotStarted) {
		t.Fatalf("Consuming with the broker out of reach = %v, %v; want false and why", ok, err)
	}
	p.Accept()
	<-sessions
	if ok, err := r.Consuming(); !ok || err != nil {
		t.Fatalf("Consuming once reconnected = %v, %v; want true", ok, err)
	}
}
