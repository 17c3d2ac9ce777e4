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
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/backstophq/backstop/admin"
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
	ns := serveNATSSource(t, true, "")
	p, base, js, prefix, hook := ns.proxy, ns.base, ns.js, ns.prefix, ns.hook
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
	ch, queue := rabbitQueue(t)
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

// TestServeStartsWithItsDestinationBrokersDown starts serve while the
// NATS server and the RabbitMQ broker of its destinations cannot be
// reached: serve starts (it exited: making each transport dialed it), a
// message enqueued for each fails meanwhile, and both are published once
// the brokers are reachable.
func TestServeStartsWithItsDestinationBrokersDown(t *testing.T) {
	js, stream, prefix := natsSource(t)
	ch, queue := rabbitQueue(t)
	deliveries, err := ch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	published, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}

	via := func(raw string) (*tcpProxy, string) {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		p := newTCPProxy(t, u.Host)
		p.cut()
		u.Host = p.addr
		return p, u.String()
	}
	np, natsURL := via(testenv.NATSURL())
	rp, amqpURL := via(testenv.AMQPURL())
	const policy = `retry: {base: 20ms, max: 100ms, jitter: 0, max_attempts: 1000}, inner_retry: {attempts: 1}, breaker: {timeout: 100ms}`
	cl, base := startServe(t, fmt.Sprintf(`listen: 127.0.0.1:0
db: 'sqlite:%s'
relay: {poll_interval: 20ms}
tokens:
  - {name: ops, token: operate-token-0123456789, role: operate}
destinations:
  - {name: to-nats, type: nats, url: '%s', subject: '%s.{type}', stream: %s, %s}
  - {name: to-rabbit, type: rabbitmq, url: '%s', routing_key: %s, %s}
`, filepath.Join(t.TempDir(), "b.db"), natsURL, prefix, stream, policy, amqpURL, queue, policy))
	awaitReadyz(t, base, "", http.StatusOK, "")
	for _, dest := range []string{"to-nats", "to-rabbit"} {
		if _, err := cl.Enqueue(ctx, admin.EnqueueRequest{Destination: dest, Type: "order.created", Payload: []byte(`{"to":"` + dest + `"}`)}); err != nil {
			t.Fatal(err)
		}
	}

	np.reopen(t)
	rp.reopen(t)
	m, err := published.Next(jetstream.FetchContext(ctx))
	if err != nil {
		t.Fatalf("nothing published to NATS once it was reachable: %v", err)
	}
	if string(m.Data()) != `{"to":"to-nats"}` {
		t.Errorf("NATS got %s", m.Data())
	}
	select {
	case d := <-deliveries:
		if string(d.Body) != `{"to":"to-rabbit"}` {
			t.Errorf("RabbitMQ got %s", d.Body)
		}
	case <-ctx.Done():
		t.Fatal("nothing published to RabbitMQ once it was reachable")
	}
}
