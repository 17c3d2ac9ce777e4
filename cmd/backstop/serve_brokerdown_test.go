package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/backstophq/backstop/internal/config"
	"github.com/backstophq/backstop/internal/testenv"
)

// reopen listens again on the proxy's address, after cut: the server
// behind it is reachable again.
func (p *tcpProxy) reopen(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	p.accept(ln)
}

// TestServeStartsWithTheNATSSourceDown starts serve while its NATS
// source's server cannot be reached (a proxy with nothing listening):
// serve starts, /readyz names source:orders as not ready, with why; once
// the server is reachable, a message published is forwarded and /readyz
// turns ready. Before, serve exited at its start: the source connected
// and created its consumer before serving, and failed on a server down.
func TestServeStartsWithTheNATSSourceDown(t *testing.T) {
	js, stream, prefix := natsSource(t)
	u, err := url.Parse(testenv.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	p := newTCPProxy(t, u.Host)
	p.cut()
	via := *u
	via.Host = p.addr
	hook := newHookRecorder(t)
	_, base := startServe(t, fmt.Sprintf(`listen: 127.0.0.1:0
db: 'sqlite:%s'
relay: {poll_interval: 20ms}
destinations:
  - {name: partner-hook, type: webhook, url: '%s', inner_retry: {attempts: 1}}
sources:
  - inbox: orders
    type: nats
    url: %s
    stream: %s
    consumer: backstop
    forward: {to: [partner-hook]}
`, filepath.Join(t.TempDir(), "b.db"), hook.srv.URL, via.String(), stream))
	awaitReadyz(t, base, "", http.StatusServiceUnavailable, "source:orders")
	awaitReadyz(t, base, "?exclude=source:orders", http.StatusOK, "")

	p.reopen(t)
	awaitReadyz(t, base, "", http.StatusOK, "")
	publishNATS(t, js, prefix+".created", "n1", `{"id":"n1"}`, false)
	if f := hook.await(t, "n1"); f.id == "" || f.body != `{"id":"n1"}` {
		t.Errorf("forwarded %+v, want n1", f)
	}
}

// TestServeStartsWithTheRabbitMQSourceDown: the same for a RabbitMQ
// source. Before, the receiver's first dial failed and serve exited.
func TestServeStartsWithTheRabbitMQSourceDown(t *testing.T) {
	conn, err := amqp.DialConfig(testenv.AMQPURL(), amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
	if err != nil {
		testenv.Unreachable(t, "RabbitMQ at "+testenv.AMQPURL(), testenv.AMQPEnv, err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	queue := "servetest_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	if _, err := ch.QueueDeclare(queue, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ch.QueueDelete(queue, false, false, false); ch.Close() })
	u, err := url.Parse(testenv.AMQPURL())
	if err != nil {
		t.Fatal(err)
	}
	p := newTCPProxy(t, u.Host)
	p.cut()
	via := *u
	via.Host = p.addr
	hook := newHookRecorder(t)
	_, base := startServe(t, fmt.Sprintf(`listen: 127.0.0.1:0
db: 'sqlite:%s'
relay: {poll_interval: 20ms}
destinations:
  - {name: ledger, type: webhook, url: '%s', inner_retry: {attempts: 1}}
sources:
  - inbox: payments
    type: rabbitmq
    url: %s
    queue: %s
    forward: {to: [ledger]}
`, filepath.Join(t.TempDir(), "b.db"), hook.srv.URL, via.String(), queue))
	awaitReadyz(t, base, "", http.StatusServiceUnavailable, "source:payments")

	p.reopen(t)
	awaitReadyz(t, base, "", http.StatusOK, "")
	if err := ch.PublishWithContext(context.Background(), "", queue, false, false, amqp.Publishing{MessageId: "r1",
		Type: "payment.settled", Body: []byte(`{"id":"r1"}`)}); err != nil {
		t.Fatal(err)
	}
	if f := hook.await(t, "r1"); f.body != `{"id":"r1"}` {
		t.Errorf("forwarded %+v, want r1", f)
	}
}

// TestServeRefusesAMissingNATSStream: what the server refuses and no
// retry cures still stops serve at its start, naming the source and the
// config key: here a stream that does not exist.
func TestServeRefusesAMissingNATSStream(t *testing.T) {
	natsSource(t) // skips without NATS
	hook := newHookRecorder(t)
	c, err := config.Parse(fmt.Appendf(nil, `listen: 127.0.0.1:0
db: 'sqlite:%s'
destinations:
  - {name: partner-hook, type: webhook, url: '%s'}
sources:
  - inbox: orders
    type: nats
    url: %s
    stream: NO_SUCH_STREAM_%s
    consumer: backstop
    forward: {to: [partner-hook]}
`, filepath.Join(t.TempDir(), "b.db"), hook.srv.URL, testenv.NATSURL(), strings.ReplaceAll(uuid.NewString(), "-", "")),
		func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	err = serve(t.Context(), c, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	if err == nil || !strings.Contains(err.Error(), "sources[0] (inbox orders): stream: ") || !strings.Contains(err.Error(), "stream not found") {
		t.Fatalf("serve = %v, want an error naming sources[0]'s stream, not found", err)
	}
}
