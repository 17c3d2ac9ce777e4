package rabbitinbox

import (
	"fmt"
	"net/url"
	"slices"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/backstophq/backstop/inbox/internal/inboxtest"
	"github.com/backstophq/backstop/internal/testenv"
)

// TestReconnect cuts the receiver's connection twice after it stored a
// message and before it acknowledged it, and once while it waited for
// messages: each time it dials again and consumes again, the broker
// delivers the unacknowledged message again and the inbox drops it, and
// every message is handled once, in the queue's order.
func TestReconnect(t *testing.T) {
	t.Parallel()
	admin := connect(t)
	u, err := url.Parse(testenv.AMQPURL())
	if err != nil {
		t.Fatal(err)
	}
	inboxtest.ForEachStore(t, func(t *testing.T, k inboxtest.Kind) {
		e := inboxtest.NewEnv(t, k)
		queue, ch := newQueue(t, admin)
		in := e.RecordingInbox()
		var want []string
		for i := range 6 {
			id := fmt.Sprintf("m%d", i)
			publish(t, e.Ctx, ch, queue, id, "order-1")
			want = append(want, id+"@1")
		}

		p := inboxtest.NewProxy(t, u.Host)
		via := *u
		via.Host = p.Addr()
		r, err := New(Config{Inbox: in, URL: via.String(), Queue: queue, Logger: inboxtest.Quiet,
			ReconnectDelay: 5 * time.Millisecond, MaxReconnectDelay: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		sessions := make(chan struct{}, 10)
		r.consuming = func() { sessions <- struct{}{} }
		r.afterStore = func(d *amqp.Delivery) {
			// m2 and m4 are stored, then the connection dies before
			// their ack.
			if (d.MessageId == "m2" || d.MessageId == "m4") && !d.Redelivered {
				p.Cut()
			}
		}
		e.Go("receiver", r.Run)
		e.Go("inbox", in.Run)
		e.WaitFor("six handled", func() bool { return in.Relay().Stats().Delivered == 6 })

		// Cut while idle: the receiver consumes again and takes m6.
		inboxtest.Await(t, e.Ctx, "a session", sessions, 3)
		p.Cut()
		inboxtest.Await(t, e.Ctx, "a session", sessions, 1)
		publish(t, e.Ctx, ch, queue, "m6", "order-1")
		want = append(want, "m6@1")
		e.WaitFor("m6 handled", func() bool { return in.Relay().Stats().Delivered == 7 })

		if got := e.Handled()["order-1"]; !slices.Equal(got, want) {
			t.Errorf("handled %v, want %v", got, want)
		}
		// m2 and m4 come again; so does m5 when the idle cut caught its
		// ack on the way (the relay may handle m5 before it is acked).
		if n := e.Counter("backstop_inbox_duplicates_total", "source", "amqp"); n != 2 && n != 3 {
			t.Errorf("duplicates_total = %d, want 2 (m2 and m4 delivered again) or 3 (m5 too)", n)
		}
		if n := e.OutboxRows("inbox:orders"); n != 0 {
			t.Errorf("%d inbox rows left, want 0", n)
		}
		q, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil)
		if err != nil || q.Messages != 0 {
			t.Errorf("queue holds %d ready messages (%v), want 0", q.Messages, err)
		}
	})
}

// TestFirstSessionFails: a receiver whose queue does not exist fails at
// once instead of trying again forever.
func TestFirstSessionFails(t *testing.T) {
	t.Parallel()
	connect(t)
	e := inboxtest.NewEnv(t, inboxtest.Kinds[0])
	in := e.NewInbox(e.Config())
	r, err := New(Config{Inbox: in, URL: testenv.AMQPURL(), Queue: "inboxtest_no_such_queue", Logger: inboxtest.Quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Run(e.Ctx); err == nil {
		t.Fatal("Run on a missing queue returned nil, want an error")
	}
}

// TestConsumerCancelledByTheBroker: the queue is deleted under the
// receiver, so the broker cancels its consumer while the channel stays
// open (as it does for a queue deleted by an operator or lost with its
// node). The receiver must not wait for a channel close that never comes:
// it consumes again, failing while the queue is missing, and takes the
// messages of the queue declared again.
func TestConsumerCancelledByTheBroker(t *testing.T) {
	t.Parallel()
	admin := connect(t)
	inboxtest.ForEachStore(t, func(t *testing.T, k inboxtest.Kind) {
		e := inboxtest.NewEnv(t, k)
		queue, ch := newQueue(t, admin)
		in := e.RecordingInbox()
		r, err := New(Config{Inbox: in, URL: testenv.AMQPURL(), Queue: queue, Logger: inboxtest.Quiet,
			ReconnectDelay: 5 * time.Millisecond, MaxReconnectDelay: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		sessions := make(chan struct{}, 10)
		retries := make(chan struct{}, 100)
		r.consuming = func() { sessions <- struct{}{} }
		r.reconnecting = func() {
			select {
			case retries <- struct{}{}:
			default:
			}
		}
		e.Go("receiver", r.Run)
		e.Go("inbox", in.Run)
		inboxtest.Await(t, e.Ctx, "a session", sessions, 1)
		publish(t, e.Ctx, ch, queue, "m1", "order-1")
		e.WaitFor("m1 handled", func() bool { return in.Relay().Stats().Delivered == 1 })

		if _, err := ch.QueueDelete(queue, false, false, false); err != nil {
			t.Fatal(err)
		}
		// The receiver tries again while the queue is missing.
		inboxtest.Await(t, e.Ctx, "a retry", retries, 1)
		if _, err := ch.QueueDeclare(queue, false, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		inboxtest.Await(t, e.Ctx, "a session", sessions, 1)
		publish(t, e.Ctx, ch, queue, "m2", "order-1")
		e.WaitFor("m2 handled", func() bool { return in.Relay().Stats().Delivered == 2 })
		if got := e.Handled()["order-1"]; !slices.Equal(got, []string{"m1@1", "m2@1"}) {
			t.Errorf("handled %v, want m1 then m2, once each", got)
		}
	})
}
