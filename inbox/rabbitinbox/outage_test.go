package rabbitinbox

import (
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/backstophq/backstop/inbox"
	"github.com/backstophq/backstop/inbox/internal/inboxtest"
)

// TestStoreOutageDoesNotUseUpTheDeliveryLimit takes the inbox's
// PostgreSQL store away (a proxy that refuses connections) while a
// message arrives on a quorum queue with x-delivery-limit 2, and brings it
// back after the receiver failed to store the message three times: the
// message is then stored and handled. Before, every failure gave the
// delivery back (nack, requeue), which a quorum queue counts as a
// delivery: after the limit the broker dropped it (or dead-lettered it),
// and an outage longer than the limit × RetryDelay lost the messages that
// arrived during it.
func TestStoreOutageDoesNotUseUpTheDeliveryLimit(t *testing.T) {
	t.Parallel()
	conn := connect(t)
	e := inboxtest.NewEnv(t, inboxtest.Kinds[1])
	s, p := e.StoreThroughProxy()
	quorum := amqp.Table{"x-queue-type": "quorum", "x-delivery-limit": int32(2)}
	queue, ch := declareQueue(t, conn, true, quorum)
	in, err := inbox.New(s, e.Config())
	if err != nil {
		t.Fatal(err)
	}
	in.Handle("order.created", e.Record)
	log, failures := inboxtest.SignalOn("cannot store a received message")
	r, err := New(Config{Inbox: in, Conn: conn, Queue: queue, Logger: log, RetryDelay: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	e.Go("receiver", r.Run)
	p.Refuse()
	publish(t, e.Ctx, ch, queue, "m1", "s")
	if !inboxtest.Within(15*time.Second, failures, 4) {
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, quorum)
		t.Fatalf("the receiver stopped trying to store the message (queue %+v, %v): the broker dropped it at its delivery limit", q, err)
	}
	p.Accept()
	e.Go("inbox", in.Run)
	e.WaitHandled(in, "s", "m1@1")
}
