package rabbitmq_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/transport/transporttest"
)

// amqpURL is the broker the tests use.
func amqpURL() string { return testenv.AMQPURL() }

// admin is the test's own connection to the broker, for declaring and
// reading back.
type admin struct {
	t    *testing.T
	conn *amqp.Connection
	ch   *amqp.Channel
}

// connect dials the test broker. It skips the test when the broker is not
// reachable, or fails it when CI=true.
func connect(t *testing.T) *admin {
	t.Helper()
	conn, err := amqp.DialConfig(amqpURL(), amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
	if err != nil {
		testenv.Unreachable(t, "RabbitMQ at "+amqpURL(), testenv.AMQPEnv, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &admin{t: t, conn: conn, ch: openChannel(t, conn)}
}

func openChannel(t *testing.T, conn *amqp.Connection) *amqp.Channel {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("open channel: %v", err)
	}
	return ch
}

// unique returns a name no other test uses.
func unique(prefix string) string {
	return prefix + "." + strings.ReplaceAll(uuid.NewString(), "-", "")
}

// exchange declares a topic exchange and deletes it when the test ends.
func (a *admin) exchange(name string) string {
	a.t.Helper()
	if err := a.ch.ExchangeDeclare(name, amqp.ExchangeTopic, false, false, false, false, nil); err != nil {
		a.t.Fatalf("declare exchange %s: %v", name, err)
	}
	a.t.Cleanup(func() { _ = a.ch.ExchangeDelete(name, false, false) })
	return name
}

// queue declares a queue bound to exchange with key (none when exchange is
// empty) and deletes it when the test ends.
func (a *admin) queue(exchange, key string, args amqp.Table) string {
	a.t.Helper()
	q, err := a.ch.QueueDeclare(unique("bt.q"), false, false, false, false, args)
	if err != nil {
		a.t.Fatalf("declare queue: %v", err)
	}
	a.t.Cleanup(func() { _, _ = a.ch.QueueDelete(q.Name, false, false, false) })
	if exchange != "" {
		if err := a.ch.QueueBind(q.Name, key, exchange, false, nil); err != nil {
			a.t.Fatalf("bind queue: %v", err)
		}
	}
	return q.Name
}

// readBack records every message of queue, through a consumer on its own
// channel that stops when the test ends.
func (a *admin) readBack(queue string) (*transporttest.Recorder, *amqpLog) {
	a.t.Helper()
	ch := openChannel(a.t, a.conn)
	deliveries, err := ch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		a.t.Fatalf("consume %s: %v", queue, err)
	}
	rec, raw := transporttest.NewRecorder(), &amqpLog{got: make(chan amqp.Delivery, 1024)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for d := range deliveries {
			rec.Record(delivery(d))
			select {
			case raw.got <- d:
			default:
			}
		}
	}()
	a.t.Cleanup(func() { _ = ch.Close(); <-done })
	return rec, raw
}

// amqpLog keeps the raw deliveries, for the properties a Delivery lacks.
type amqpLog struct{ got chan amqp.Delivery }

// next returns the next raw delivery.
func (l *amqpLog) next(t *testing.T, ctx context.Context) amqp.Delivery {
	t.Helper()
	select {
	case d := <-l.got:
		return d
	case <-ctx.Done():
		t.Fatalf("no delivery: %v", ctx.Err())
		return amqp.Delivery{}
	}
}

// delivery turns a consumed message back into what the suite compares.
func delivery(d amqp.Delivery) transporttest.Delivery {
	headers := make(map[string]string, len(d.Headers))
	for k, v := range d.Headers {
		headers[k] = fmt.Sprint(v)
	}
	return transporttest.Delivery{
		ID:      d.MessageId,
		Stream:  headers["Backstop-Stream"],
		Type:    d.Type,
		Payload: d.Body,
		Headers: headers,
	}
}

// ctxFor returns a context that ends with the test or after 15 seconds.
func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// message returns a new message.
func message(t *testing.T) *outbox.Message {
	t.Helper()
	id, err := uuid.NewV7()
	if err != nil {
		t.Fatal(err)
	}
	return &outbox.Message{ID: id, Destination: "orders", Stream: "order-1", Type: "order.created", Payload: []byte(`{"id":1}`)}
}

// wantFault checks how the default classifier sees err.
func wantFault(t *testing.T, err error, class errorhandling.Class, blame errorhandling.Blame, code string) {
	t.Helper()
	if err == nil {
		t.Fatalf("err = nil, want a %v fault", class)
	}
	v := errorhandling.NewErrorClassifier().Classify(err)
	if v.Class != class || v.Blame != blame || (code != "" && v.Code != code) {
		t.Fatalf("Classify(%v) = class %v, blame %v, code %q; want %v, %v, %q", err, v.Class, v.Blame, v.Code, class, blame, code)
	}
}
