package rabbitinbox

import (
	"context"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/backstophq/backstop/inbox"
	"github.com/backstophq/backstop/inbox/internal/inboxtest"
	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/postgres"
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
	u, err := url.Parse(testenv.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	p := inboxtest.NewProxy(t, u.Host)
	u.Host = p.Addr()
	s, err := postgres.Open(e.Ctx, u.String(), inboxtest.StoreConfig(e.Clk), postgres.WithSchema(e.Spec))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.Close() })
	queue := "inboxtest_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{
		"x-queue-type": "quorum", "x-delivery-limit": int32(2)}); err != nil {
		t.Fatalf("declare quorum queue: %v", err)
	}
	t.Cleanup(func() {
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(queue, false, false, false)
			ch.Close()
		}
	})
	in, err := inbox.New(s, e.Config())
	if err != nil {
		t.Fatal(err)
	}
	in.Handle("order.created", func(ctx context.Context, tx store.Tx, msg *inbox.Message) error {
		return e.Record(ctx, tx, msg)
	})
	log, failures := inboxtest.SignalOn("cannot store a received message")
	r, err := New(Config{Inbox: in, Conn: conn, Queue: queue, Logger: log, RetryDelay: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	e.Go("receiver", r.Run)
	p.Refuse()
	if err := ch.PublishWithContext(e.Ctx, "", queue, false, false, amqp.Publishing{MessageId: "m1",
		Type: "order.created", Headers: amqp.Table{HeaderStream: "s"}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.NewTimer(15 * time.Second)
	defer deadline.Stop()
	for range 4 {
		select {
		case <-failures:
		case <-deadline.C:
			q, err := ch.QueueDeclarePassive(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum", "x-delivery-limit": int32(2)})
			t.Fatalf("the receiver stopped trying to store the message (queue %+v, %v): the broker dropped it at its delivery limit", q, err)
		}
	}
	p.Accept()
	e.Go("inbox", in.Run)
	e.WaitFor("m1 handled", func() bool { return in.Relay().Stats().Delivered == 1 })
	if got := e.Handled()["s"]; !slices.Equal(got, []string{"m1@1"}) {
		t.Errorf("handled %v, want m1 once", got)
	}
}
