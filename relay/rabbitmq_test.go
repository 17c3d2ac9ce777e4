package relay

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/transport/rabbitmq"
)

// rabbitQueue declares a queue of its own on the test broker with args,
// deleted when the test ends, and returns its name and the channel that
// declared it.
func rabbitQueue(t *testing.T, args amqp.Table) (string, *amqp.Channel) {
	t.Helper()
	conn, err := amqp.DialConfig(testenv.AMQPURL(), amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
	if err != nil {
		testenv.Unreachable(t, "RabbitMQ at "+testenv.AMQPURL(), testenv.AMQPEnv, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	name := "bt.relay." + strings.ReplaceAll(uuid.NewString(), "-", "")
	if _, err := ch.QueueDeclare(name, false, false, false, false, args); err != nil {
		t.Fatalf("declare queue: %v", err)
	}
	t.Cleanup(func() { _, _ = ch.QueueDelete(name, false, false, false) })
	return name, ch
}

// singledOutAfter is the tests' Destination.SingledOutAfter: short, so
// that half an hour on the fake clock is 15 of it.
const singledOutAfter = 2 * time.Minute

// longEnv is newEnv with a minute and a half for the test: each step of
// the fake clock publishes to a real broker.
func longEnv(t *testing.T, opts ...func(*store.Config)) *env {
	e := newEnv(t, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second) // a safety net only
	t.Cleanup(cancel)
	e.ctx = ctx
	return e
}

// rabbitTransport publishes to queue through the default exchange.
func rabbitTransport(t *testing.T, queue string) *rabbitmq.Transport {
	t.Helper()
	tr, err := rabbitmq.New(rabbitmq.Config{URL: testenv.AMQPURL(), RoutingKey: queue, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

// drain empties queue of what it holds now.
func drain(t *testing.T, ch *amqp.Channel, queue string) {
	t.Helper()
	if _, err := ch.QueuePurge(queue, false); err != nil {
		t.Fatal(err)
	}
}

// TestRabbitMessageOverQueueByteLimitIsParked: a message larger than its
// queue's x-max-length-bytes, with x-overflow reject-publish, is nacked
// by the broker every time (a nack carries no reason) while the queue
// takes the others. It ends in the dead-letter queue, singled out, with
// an error that says what the broker refuses and how large the message
// is, rather than being retried for ever.
func TestRabbitMessageOverQueueByteLimitIsParked(t *testing.T) {
	e := longEnv(t)
	queue, ch := rabbitQueue(t, amqp.Table{"x-max-length-bytes": int32(1024), "x-overflow": "reject-publish"})
	big := msg("rabbit", "big", 1)
	big.Payload = bytes.Repeat([]byte("x"), 4096)
	e.enqueue(big)
	rn := e.start(e.config(map[string]Destination{"rabbit": {Transport: rabbitTransport(t, queue), SingledOutAfter: singledOutAfter}}))
	rn.settle()

	// Small messages beside it, which the queue takes, its consumer
	// emptying it, every 30 s for up to half an hour.
	for i := 0; i < 60 && len(e.deadLetters()) == 0; i++ {
		e.enqueue(msg("rabbit", "small", i))
		rn.advance(30 * time.Second)
		drain(t, ch, queue)
	}
	dl := e.deadLetters()
	if len(dl) != 1 || dl[0].MessageID != big.ID.String() {
		t.Fatalf("dead letters after half an hour: %+v, want the message larger than the queue's limit", dl)
	}
	for _, want := range []string{"singled out", "nacked", "4096-byte body", "x-max-length-bytes"} {
		if !strings.Contains(dl[0].ErrorMessage, want) {
			t.Errorf("dead letter's error %q does not say %q", dl[0].ErrorMessage, want)
		}
	}
}

// TestRabbitFullQueueIsAnOutage: a queue full with x-overflow
// reject-publish nacks every message. That is the destination's outage:
// however long it lasts, no message is charged an attempt, and all are
// delivered once the queue has room again.
func TestRabbitFullQueueIsAnOutage(t *testing.T) {
	e := longEnv(t)
	queue, ch := rabbitQueue(t, amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"})
	rn := e.start(e.config(map[string]Destination{"rabbit": {Transport: rabbitTransport(t, queue), SingledOutAfter: singledOutAfter}}))
	first := msg("rabbit", "a", 0)
	e.enqueue(first)
	rn.settle()
	if e.get(first.ID) != nil {
		t.Fatal("the first message, which the queue had room for, was not delivered")
	}
	var waiting []uuid.UUID
	for i := 1; i <= 3; i++ {
		m := msg("rabbit", string(rune('a'+i)), i)
		e.enqueue(m)
		waiting = append(waiting, m.ID)
	}
	for range 20 { // half an hour, 15 times SingledOutAfter, the queue full throughout
		rn.advance(90 * time.Second)
	}
	for _, id := range waiting {
		got := e.get(id)
		if got == nil {
			t.Fatalf("message %s delivered into a full queue", id)
		}
		if got.Attempts != 0 || !got.DeadLetteredAt.IsZero() {
			t.Fatalf("after half an hour's full queue: %+v, want waiting, uncharged", got)
		}
	}
	rn.waitFor("every message delivered once the queue has room", func() bool {
		drain(t, ch, queue)
		rn.e.clk.Advance(10 * time.Minute)
		for _, id := range waiting {
			if e.get(id) != nil {
				return false
			}
		}
		return true
	})
}

// TestRabbitCongestedQueueChargesNothing: a queue full with x-overflow
// reject-publish whose consumer takes a message now and then (slower than
// they come) nacks most publishes, and takes one after each message its
// consumer took. Every message waits its turn: none is singled out,
// charged an attempt or dead-lettered, however long the congestion lasts.
func TestRabbitCongestedQueueChargesNothing(t *testing.T) {
	e := longEnv(t, withOrdering(outbox.OrderingNone))
	queue, ch := rabbitQueue(t, amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"})
	rn := e.start(e.config(map[string]Destination{"rabbit": {Transport: rabbitTransport(t, queue), SingledOutAfter: singledOutAfter}}))
	var ids []uuid.UUID
	// Two messages come a minute, the consumer takes one, for half an
	// hour.
	for i := range 30 {
		for j := range 2 {
			m := msg("rabbit", "", 2*i+j)
			ids = append(ids, m.ID)
			e.enqueue(m)
		}
		for range 2 {
			rn.advance(30 * time.Second)
		}
		if _, _, err := ch.Get(queue, true); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		if got := e.get(id); got != nil && (got.Attempts != 0 || !got.DeadLetteredAt.IsZero()) {
			t.Fatalf("a message of a congested queue was charged: %+v (last error %q)", got, got.Error)
		}
	}
	if dl := e.deadLetters(); len(dl) != 0 {
		t.Fatalf("dead letters of a congested queue: %d, the first: %q", len(dl), dl[0].ErrorMessage)
	}
}
