package rabbitinbox

import (
	"bytes"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/backstophq/backstop/inbox"
	"github.com/backstophq/backstop/inbox/internal/inboxtest"
	"github.com/backstophq/backstop/internal/testenv"
)

// TestHostileMessages publishes deliveries no receiver should store (no
// message-id; one with a NUL, invalid UTF-8 or a C1 control; a type or
// stream with a control character; a body over the inbox's limit) and
// deliveries odd but storable (headers of every AMQP type, with values
// that cannot be carried), then a plain one behind them: the refused ones
// are rejected without requeue, the others handled once, and the queue
// ends empty.
func TestHostileMessages(t *testing.T) {
	t.Parallel()
	conn := connect(t)
	inboxtest.ForEachStore(t, func(t *testing.T, k inboxtest.Kind) {
		e := inboxtest.NewEnv(t, k)
		queue, ch := newQueue(t, conn)
		cfg := e.Config()
		cfg.Limits.MaxPayloadBytes = 4096
		in := e.NewInbox(cfg)
		var handled inboxtest.Tally
		in.HandleFunc("order.created", handled.Handle)
		send := func(p amqp.Publishing) {
			t.Helper()
			if err := ch.PublishWithContext(e.Ctx, "", queue, false, false, p); err != nil {
				t.Fatalf("publish %q: %v", p.MessageId, err)
			}
		}
		refused := []amqp.Publishing{{Type: "order.created"}}
		for _, h := range inboxtest.Refused {
			p := amqp.Publishing{MessageId: h.ID, Type: h.Type}
			if h.Stream != "" {
				p.Headers = amqp.Table{HeaderStream: h.Stream}
			}
			refused = append(refused, p)
		}
		refused = append(refused, []amqp.Publishing{
			{MessageId: "bad-stream", Type: "order.created", Headers: amqp.Table{HeaderStream: "s\n1"}},
			{MessageId: "long-stream", Type: "order.created", Headers: amqp.Table{HeaderStream: strings.Repeat("s", 300)}},
			{MessageId: "big-body", Type: "order.created", Body: bytes.Repeat([]byte("x"), 4097)},
		}...)
		for _, p := range refused {
			send(p)
		}
		kept := []string{
			inboxtest.QuotedID,
			strings.Repeat("m", 255), // the most a message-id (shortstr) holds
			"odd-headers",
		}
		send(amqp.Publishing{MessageId: kept[0], Type: "order.created", Body: []byte("{}")})
		send(amqp.Publishing{MessageId: kept[1], Type: "order.created"})
		send(amqp.Publishing{MessageId: kept[2], Type: "order.created", ContentType: "text/plain\x00",
			Body: bytes.Repeat([]byte("y"), 4096), Headers: amqp.Table{
				"x-nul": inboxtest.NULValue, "x-bad": inboxtest.BadUTF8, "x-big": inboxtest.HugeValue, "x ok": "space",
				"X-Int": int32(7), "X-Table": amqp.Table{"a": "b"}, "X-Bytes": []byte("b"), "X-List": []any{"a", int64(1)},
				"X-Time": time.Unix(0, 0), "X-Nil": nil, "X-Ok": "ok", "x-ok": "second spelling",
			}})
		send(amqp.Publishing{MessageId: "last", Type: "order.created"})

		r, err := New(Config{Inbox: in, Conn: conn, Queue: queue, Logger: inboxtest.Quiet})
		if err != nil {
			t.Fatal(err)
		}
		e.Go("receiver", r.Run)
		e.Go("inbox", in.Run)
		e.WaitFor("every stored message handled", func() bool { return in.Relay().Stats().Delivered == int64(len(kept)+1) })
		e.WaitFor("the queue empty", func() bool {
			q, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil)
			return err == nil && q.Messages == 0
		})
		handled.CheckOnce(t, append(kept, "last")...)
		if n := e.Counter("backstop_inbox_rejected_total", "source", "amqp"); n != len(refused) {
			t.Errorf("rejected_total = %d, want %d", n, len(refused))
		}
	})
}

// TestTwoInstancesManyRedeliveries runs two inbox instances on one store,
// each consuming the queue on a connection of its own with four
// deliveries ahead, publishes every message id three times, and has each
// receiver give back the first two deliveries of each copy after storing
// it: every message is handled once.
func TestTwoInstancesManyRedeliveries(t *testing.T) {
	t.Parallel()
	admin := connect(t)
	inboxtest.ForEachStore(t, func(t *testing.T, k inboxtest.Kind) {
		e := inboxtest.NewEnv(t, k)
		queue, ch := newQueue(t, admin)
		const n = 30
		var ins []*inbox.Inbox
		var seen sync.Map
		for i := range 2 {
			cfg := e.Config()
			cfg.Metrics = nil
			in := e.NewInbox(cfg)
			in.Handle("order.created", e.Record)
			r, err := New(Config{Inbox: in, URL: testenv.AMQPURL(), Queue: queue, Prefetch: 4,
				Logger: inboxtest.Quiet, RetryDelay: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			r.ack = func(d *amqp.Delivery) bool {
				key := fmt.Sprintf("%s/%v", d.MessageId, d.Headers["copy"])
				v, _ := seen.LoadOrStore(key, new(atomic.Int32))
				return v.(*atomic.Int32).Add(1) > 2
			}
			e.Go(fmt.Sprintf("receiver %d", i), r.Run)
			e.Go(fmt.Sprintf("inbox %d", i), in.Run)
			ins = append(ins, in)
		}
		var want []string
		for i := range n {
			id := fmt.Sprintf("m%02d", i)
			for c := range 3 {
				if err := ch.PublishWithContext(e.Ctx, "", queue, false, false, amqp.Publishing{MessageId: id,
					Type: "order.created", Headers: amqp.Table{HeaderStream: fmt.Sprintf("s%d", i%4), "copy": int32(c)}}); err != nil {
					t.Fatal(err)
				}
			}
			want = append(want, id+"@1")
		}
		e.WaitFor("every message handled and the queue empty", func() bool {
			if ins[0].Relay().Stats().Delivered+ins[1].Relay().Stats().Delivered != n {
				return false
			}
			q, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil)
			return err == nil && q.Messages == 0
		})
		var got []string
		for _, s := range e.Handled() {
			got = append(got, s...)
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("handled %v, want each of %d once", got, n)
		}
	})
}

// TestConnectionClosedByTheBroker has the broker close the receiver's
// connection (rabbitmqctl close_connection, as an operator or a broker
// restart does) after the receiver stored a message and before it
// acknowledged it: the receiver dials again, the broker delivers the
// message again and the inbox drops it, and the messages published after
// are handled; each once.
func TestConnectionClosedByTheBroker(t *testing.T) {
	t.Parallel()
	ctl, err := exec.LookPath("rabbitmqctl")
	if err != nil {
		if testenv.InCI() {
			t.Fatalf("rabbitmqctl: %v", err)
		}
		t.Skipf("rabbitmqctl is not installed: %v", err)
	}
	admin := connect(t)
	k := inboxtest.Kinds[0]
	e := inboxtest.NewEnv(t, k)
	queue, ch := newQueue(t, admin)
	in := e.RecordingInbox()
	name := "inboxtest-" + queue
	r, err := New(Config{Inbox: in, URL: testenv.AMQPURL(), Queue: queue, Logger: inboxtest.Quiet,
		AMQP: amqp.Config{Properties: amqp.Table{"connection_name": name}}, ReconnectDelay: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	sessions := make(chan struct{}, 10)
	r.consuming = func() { sessions <- struct{}{} }
	closeConn := func() {
		out, err := exec.Command(ctl, "-q", "list_connections", "pid", "client_properties").Output()
		if err != nil {
			t.Errorf("list_connections: %v", err)
			return
		}
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) > 1 && strings.Contains(line, `"`+name+`"`) {
				if out, err := exec.Command(ctl, "close_connection", f[0], "probe").CombinedOutput(); err != nil {
					t.Errorf("close_connection: %v: %s", err, out)
				}
				return
			}
		}
		t.Errorf("no connection named %s in %s", name, out)
	}
	r.afterStore = func(d *amqp.Delivery) {
		if d.MessageId == "m1" && !d.Redelivered {
			closeConn()
		}
	}
	for i := range 3 {
		publish(t, e.Ctx, ch, queue, fmt.Sprintf("m%d", i), "s")
	}
	e.Go("receiver", r.Run)
	e.Go("inbox", in.Run)
	inboxtest.Await(t, e.Ctx, "a session", sessions, 2)
	publish(t, e.Ctx, ch, queue, "m3", "s")
	e.WaitHandled(in, "s", "m0@1", "m1@1", "m2@1", "m3@1")
	if n := e.Counter("backstop_inbox_duplicates_total", "source", "amqp"); n != 1 {
		t.Errorf("duplicates_total = %d, want 1 (m1 again)", n)
	}
}

// TestStoreClosedWhileReceiving closes the inbox's SQLite store under a
// running receiver: the delivery that arrives meanwhile is not
// acknowledged but held and tried again, goes back to the queue when the
// receiver stops, and a receiver on the store opened again handles it
// once.
func TestStoreClosedWhileReceiving(t *testing.T) {
	t.Parallel()
	conn := connect(t)
	k := inboxtest.Kinds[0]
	e := inboxtest.NewEnv(t, k)
	queue, ch := newQueue(t, conn)
	in := e.NewInbox(e.Config())
	log, refusals := inboxtest.SignalOn("cannot store a received message")
	r, err := New(Config{Inbox: in, URL: testenv.AMQPURL(), Queue: queue, Logger: log, RetryDelay: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stored := make(chan struct{}, 1)
	r.afterStore = func(*amqp.Delivery) { stored <- struct{}{} }
	stop := e.Start("Run", r.Run)
	publish(t, e.Ctx, ch, queue, "before", "s")
	inboxtest.Await(t, e.Ctx, "before stored", stored, 1)
	if err := e.S.Close(); err != nil {
		t.Fatal(err)
	}
	publish(t, e.Ctx, ch, queue, "during", "s")
	inboxtest.Await(t, e.Ctx, "two failed tries", refusals, 2)
	stop()

	e2 := inboxtest.OpenEnv(t, k, e.Spec, e.Clk)
	in2 := e2.RecordingInbox()
	r2, err := New(Config{Inbox: in2, Conn: conn, Queue: queue, Logger: inboxtest.Quiet})
	if err != nil {
		t.Fatal(err)
	}
	e2.Go("receiver", r2.Run)
	e2.Go("inbox", in2.Run)
	e2.WaitHandled(in2, "s", "before@1", "during@1")
}
