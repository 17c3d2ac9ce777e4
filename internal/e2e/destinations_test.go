package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/transport"
	natstransport "github.com/backstophq/backstop/transport/nats"
	"github.com/backstophq/backstop/transport/rabbitmq"
	"github.com/backstophq/backstop/transport/transporttest"
	"github.com/backstophq/backstop/transport/webhook"
)

// destinationKind is a column of the matrix: a transport and the real
// destination behind it.
type destinationKind struct {
	name string
	// dedup says the destination drops a re-send of a message it holds
	// (JetStream, by Nats-Msg-Id): a re-sent message arrives once.
	dedup bool
	open  func(t *testing.T) *destination
}

var destinations = []destinationKind{
	{name: "webhook", open: openWebhook},
	{name: "nats", dedup: true, open: openNATS},
	{name: "rabbitmq", open: openRabbitMQ},
	{name: "func", open: openFunc},
}

// destination is one test's destination.
type destination struct {
	// rec holds what arrived, in arrival order.
	rec *transporttest.Recorder
	// transport returns a new client of the destination, closed when the
	// test ends: each relay process has its own.
	transport func(t *testing.T) transport.Transport
	// stored counts the messages the destination holds, when it can say
	// (a JetStream stream); nil otherwise.
	stored func(ctx context.Context) (uint64, error)
}

// closeWithTest closes tr when the test ends.
func closeWithTest(t *testing.T, tr transport.Transport) transport.Transport {
	t.Cleanup(func() {
		if err := tr.Close(); err != nil {
			t.Errorf("close transport: %v", err)
		}
	})
	return tr
}

// openWebhook starts an HTTP server that records every request and
// answers 200.
func openWebhook(t *testing.T) *destination {
	rec := transporttest.NewRecorder()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		headers := make(map[string]string, len(r.Header))
		for k := range r.Header {
			headers[k] = r.Header.Get(k)
		}
		rec.Record(transporttest.Delivery{
			ID:      r.Header.Get(webhook.HeaderMessageID),
			Stream:  r.Header.Get(webhook.HeaderStream),
			Type:    r.Header.Get(webhook.HeaderType),
			Payload: body,
			Headers: headers,
		})
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	return &destination{
		rec: rec,
		transport: func(t *testing.T) transport.Transport {
			tr, err := webhook.New(webhook.Config{URL: srv.URL + "/hooks/orders", Secret: []byte("e2e-secret")})
			if err != nil {
				t.Fatalf("webhook.New: %v", err)
			}
			return closeWithTest(t, tr)
		},
	}
}

// openNATS creates a JetStream stream for the test alone (deleted when it
// ends) and reads it back through an ordered consumer.
func openNATS(t *testing.T) *destination {
	t.Helper()
	ctx := testContext(t)
	nc, err := nats.Connect(natsURL(), nats.Timeout(2*time.Second))
	if err == nil {
		t.Cleanup(nc.Close)
		var js jetstream.JetStream
		if js, err = jetstream.New(nc); err == nil {
			if _, err = js.AccountInfo(ctx); err == nil {
				return natsStream(t, ctx, js)
			}
		}
	}
	unreachable(t, "NATS JetStream at "+natsURL(), "BACKSTOP_TEST_NATS_URL", err)
	return nil
}

func natsStream(t *testing.T, ctx context.Context, js jetstream.JetStream) *destination {
	t.Helper()
	prefix := unique("e2e", "_")
	name := strings.ToUpper(prefix)
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:       name,
		Subjects:   []string{prefix + ".>"},
		Storage:    jetstream.MemoryStorage,
		Duplicates: 10 * time.Minute, // longer than any test: a re-send is always caught
	})
	if err != nil {
		t.Fatalf("create stream %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, name); err != nil {
			t.Errorf("delete stream %s: %v", name, err)
		}
	})
	rec := transporttest.NewRecorder()
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatalf("ordered consumer: %v", err)
	}
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		h := msg.Headers()
		headers := make(map[string]string, len(h))
		for k := range h {
			headers[k] = h.Get(k)
		}
		rec.Record(transporttest.Delivery{
			ID:      h.Get(jetstream.MsgIDHeader),
			Stream:  h.Get(natstransport.HeaderStream),
			Type:    h.Get(natstransport.HeaderType),
			Payload: msg.Data(),
			Headers: headers,
		})
	})
	if err != nil {
		t.Fatalf("consume: %v", err)
	}
	t.Cleanup(cc.Stop)
	return &destination{
		rec: rec,
		transport: func(t *testing.T) transport.Transport {
			tr, err := natstransport.New(natstransport.Config{
				URL:     natsURL(),
				Subject: prefix + ".{destination}.{type}",
				Stream:  name,
			})
			if err != nil {
				t.Fatalf("natstransport.New: %v", err)
			}
			return closeWithTest(t, tr)
		},
		stored: func(ctx context.Context) (uint64, error) {
			info, err := s.Info(ctx)
			if err != nil {
				return 0, err
			}
			return info.State.Msgs, nil
		},
	}
}

// openRabbitMQ declares a topic exchange and a queue bound to it for the
// test alone (deleted when it ends), and consumes the queue.
func openRabbitMQ(t *testing.T) *destination {
	t.Helper()
	conn, err := amqp.DialConfig(amqpURL(), amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
	if err != nil {
		unreachable(t, "RabbitMQ at "+amqpURL(), "BACKSTOP_TEST_AMQP_URL", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("open channel: %v", err)
	}
	exchange, queue := unique("e2e.ex", "."), unique("e2e.q", ".")
	if err := ch.ExchangeDeclare(exchange, amqp.ExchangeTopic, false, false, false, false, nil); err != nil {
		t.Fatalf("declare exchange: %v", err)
	}
	t.Cleanup(func() { _ = ch.ExchangeDelete(exchange, false, false) })
	if _, err := ch.QueueDeclare(queue, false, false, false, false, nil); err != nil {
		t.Fatalf("declare queue: %v", err)
	}
	t.Cleanup(func() { _, _ = ch.QueueDelete(queue, false, false, false) })
	if err := ch.QueueBind(queue, "#", exchange, false, nil); err != nil {
		t.Fatalf("bind queue: %v", err)
	}

	cch, err := conn.Channel()
	if err != nil {
		t.Fatalf("open channel: %v", err)
	}
	deliveries, err := cch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		t.Fatalf("consume: %v", err)
	}
	rec := transporttest.NewRecorder()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for d := range deliveries {
			headers := make(map[string]string, len(d.Headers))
			for k, v := range d.Headers {
				headers[k] = fmt.Sprint(v)
			}
			rec.Record(transporttest.Delivery{
				ID:      d.MessageId,
				Stream:  headers[rabbitmq.HeaderStream],
				Type:    d.Type,
				Payload: d.Body,
				Headers: headers,
			})
		}
	}()
	t.Cleanup(func() { _ = cch.Close(); <-done })
	return &destination{
		rec: rec,
		transport: func(t *testing.T) transport.Transport {
			tr, err := rabbitmq.New(rabbitmq.Config{URL: amqpURL(), Exchange: exchange, RoutingKey: "{destination}.{type}"})
			if err != nil {
				t.Fatalf("rabbitmq.New: %v", err)
			}
			return closeWithTest(t, tr)
		},
	}
}

// openFunc is the Go-handler destination: a transport.Func that records
// the message it is handed.
func openFunc(*testing.T) *destination {
	rec := transporttest.NewRecorder()
	return &destination{
		rec: rec,
		transport: func(*testing.T) transport.Transport {
			return transport.Func(func(_ context.Context, m *outbox.Message) error {
				rec.Record(transporttest.FromMessage(m))
				return nil
			})
		},
	}
}
