package rabbitinbox

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/inbox"
	"github.com/backstophq/backstop/inbox/internal/inboxtest"
	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/transport/rabbitmq"
)

// connect dials the test broker, or skips (fails under CI=true).
func connect(t *testing.T) *amqp.Connection {
	t.Helper()
	conn, err := amqp.DialConfig(testenv.AMQPURL(), amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
	if err != nil {
		testenv.Unreachable(t, "RabbitMQ at "+testenv.AMQPURL(), testenv.AMQPEnv, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// newQueue declares a queue of the test's own, deleted when it ends.
func newQueue(t *testing.T, conn *amqp.Connection) (string, *amqp.Channel) {
	t.Helper()
	return declareQueue(t, conn, false, nil)
}

// declareQueue declares a queue of the test's own with args (a quorum
// queue's must be durable), deleted when the test ends.
func declareQueue(t *testing.T, conn *amqp.Connection, durable bool, args amqp.Table) (string, *amqp.Channel) {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.Close() })
	name := "inboxtest_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	if _, err := ch.QueueDeclare(name, durable, false, false, false, args); err != nil {
		t.Fatalf("declare queue: %v", err)
	}
	t.Cleanup(func() {
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(name, false, false, false)
			ch.Close()
		}
	})
	return name, ch
}

// publish sends an order.created message of stream to queue, with the
// message-id id.
func publish(t *testing.T, ctx context.Context, ch *amqp.Channel, queue, id, stream string) {
	t.Helper()
	if err := ch.PublishWithContext(ctx, "", queue, false, false, amqp.Publishing{MessageId: id, Type: "order.created",
		Headers: amqp.Table{HeaderStream: stream}, Body: []byte("{}")}); err != nil {
		t.Fatalf("publish %q: %v", id, err)
	}
}

// TestReceiveOnce publishes through Backstop's RabbitMQ transport, forces
// the broker to deliver messages again (a nack with requeue after
// storing, the same message-id published twice), and checks that each
// message is handled once, in its stream's order; a poison message is
// dead-lettered with its reason, and a message without a message-id is
// rejected.
func TestReceiveOnce(t *testing.T) {
	t.Parallel()
	conn := connect(t)
	inboxtest.ForEachStore(t, func(t *testing.T, k inboxtest.Kind) {
		e := inboxtest.NewEnv(t, k)
		queue, ch := newQueue(t, conn)
		in := e.NewInbox(e.Config())
		in.Handle("order.created", func(ctx context.Context, tx store.Tx, msg *inbox.Message) error {
			if msg.Headers["X-Tenant"] != "acme" || msg.Source != "amqp" {
				return errorhandling.Permanent(fmt.Errorf("source %q, headers %v", msg.Source, msg.Headers))
			}
			return e.Record(ctx, tx, msg)
		})
		in.Handle("order.poison", func(ctx context.Context, tx store.Tx, msg *inbox.Message) error {
			return fmt.Errorf("order %s has no lines", msg.ID)
		})

		tr, err := rabbitmq.New(rabbitmq.Config{URL: testenv.AMQPURL(), RoutingKey: queue})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		var msgs []*outbox.Message
		for i := range 3 {
			for _, stream := range []string{"order-1", "order-2"} {
				m := &outbox.Message{ID: uuid.Must(uuid.NewV7()), Destination: "orders", Type: "order.created",
					Stream: stream, Payload: []byte(fmt.Sprintf(`{"n":%d}`, i)), Headers: map[string]string{"X-Tenant": "acme"}}
				msgs = append(msgs, m)
				if err := tr.Deliver(e.Ctx, m); err != nil {
					t.Fatalf("publish: %v", err)
				}
			}
		}
		// The first message again: RabbitMQ keeps both copies.
		if err := tr.Deliver(e.Ctx, msgs[0]); err != nil {
			t.Fatal(err)
		}
		if err := tr.Deliver(e.Ctx, &outbox.Message{Destination: "orders", Type: "order.poison", Stream: "order-9"}); err != nil {
			t.Fatal(err)
		}
		// A message of another publisher without a message-id.
		if err := ch.PublishWithContext(e.Ctx, "", queue, false, false, amqp.Publishing{Type: "order.created", Body: []byte("{}")}); err != nil {
			t.Fatal(err)
		}

		r, err := New(Config{Inbox: in, Conn: conn, Queue: queue, Logger: inboxtest.Quiet})
		if err != nil {
			t.Fatal(err)
		}
		var nacked sync.Map
		r.ack = func(d *amqp.Delivery) bool {
			// The first delivery of every message of order-2 is stored
			// and then given back: the broker delivers it again.
			if stringHeader(d.Headers, HeaderStream) != "order-2" {
				return true
			}
			_, seen := nacked.LoadOrStore(d.MessageId, true)
			return seen
		}
		e.Go("receiver", r.Run)
		e.Go("inbox", in.Run)
		e.WaitFor("all handled", func() bool {
			s := in.Relay().Stats()
			return s.Delivered == int64(len(msgs)) && s.DeadLettered == 1
		})
		got := e.Handled()
		for _, stream := range []string{"order-1", "order-2"} {
			var want []string
			for _, m := range msgs {
				if m.Stream == stream {
					want = append(want, m.ID.String()+"@1")
				}
			}
			if !slices.Equal(got[stream], want) {
				t.Errorf("stream %s handled %v, want %v", stream, got[stream], want)
			}
		}
		if n := e.Counter("backstop_inbox_duplicates_total", "source", "amqp"); n != 4 {
			t.Errorf("duplicates_total = %d, want 4 (3 nacked redeliveries, 1 re-publish)", n)
		}
		if n := e.Counter("backstop_inbox_rejected_total", "source", "amqp"); n != 1 {
			t.Errorf("rejected_total = %d, want 1", n)
		}
		if n := e.Refused(); n != 1 {
			t.Errorf("%d refused messages kept as dead letters, want 1", n)
		}
		e.CheckPoisoned("has no lines")
		q, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil)
		if err != nil || q.Messages != 0 {
			t.Errorf("queue holds %d ready messages (%v), want 0", q.Messages, err)
		}
	})
}

// TestConnectionLostBeforeAck closes the receiver's connection after it
// stored a message and before it acknowledged it: Run returns an error,
// the broker requeues the delivery, and the next receiver drops it as a
// duplicate, so the message is handled once.
func TestConnectionLostBeforeAck(t *testing.T) {
	t.Parallel()
	admin := connect(t)
	inboxtest.ForEachStore(t, func(t *testing.T, k inboxtest.Kind) {
		e := inboxtest.NewEnv(t, k)
		queue, ch := newQueue(t, admin)
		in := e.RecordingInbox()
		publish(t, e.Ctx, ch, queue, "a", "order-1")
		publish(t, e.Ctx, ch, queue, "b", "order-1")
		first := connect(t)
		r, err := New(Config{Inbox: in, Conn: first, Queue: queue, Logger: inboxtest.Quiet})
		if err != nil {
			t.Fatal(err)
		}
		r.afterStore = func(*amqp.Delivery) { first.Close() } // dies before its ack
		if err := r.Run(e.Ctx); err == nil {
			t.Fatal("Run on a closed connection returned nil, want an error")
		}
		if n := e.OutboxRows("inbox:orders"); n != 1 {
			t.Fatalf("%d rows stored before the connection was lost, want 1", n)
		}

		again, err := New(Config{Inbox: in, Conn: connect(t), Queue: queue, Logger: inboxtest.Quiet})
		if err != nil {
			t.Fatal(err)
		}
		e.Go("receiver", again.Run)
		e.Go("inbox", in.Run)
		e.WaitFor("a redelivered and b received", func() bool {
			return e.Counter("backstop_inbox_duplicates_total", "source", "amqp") == 1 && in.Relay().Stats().Delivered == 2
		})
		if got := e.Handled()["order-1"]; !slices.Equal(got, []string{"a@1", "b@1"}) {
			t.Errorf("handled %v, want [a@1 b@1]", got)
		}
	})
}

// sessions makes r signal each session whose consumer started, and
// returns the channel it signals on.
func sessions(r *Receiver) <-chan struct{} {
	ch := make(chan struct{}, 100)
	r.consuming = func() { ch <- struct{}{} }
	return ch
}
