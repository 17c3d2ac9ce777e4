package natsinbox

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop/inbox"
	"github.com/backstophq/backstop/inbox/internal/inboxtest"
	"github.com/backstophq/backstop/internal/testenv"
)

// TestReconnect cuts the receiver's NATS connection once after it stored
// a message and before it acknowledged it, and once while it waited:
// nats.go reconnects by itself, the consumer goes on (after AckWait when
// the ack was lost: JetStream delivers the message again and the inbox
// drops it), and every message is handled once, in order.
func TestReconnect(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	u, err := url.Parse(testenv.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	inboxtest.ForEachStore(t, func(t *testing.T, k inboxtest.Kind) {
		e := inboxtest.NewEnv(t, k)
		// An ack lost with the connection holds the consumer (one message
		// in flight) until JetStream delivers the message again: AckWait.
		src := newSource(t, e.Ctx, js, 2*time.Second)
		in := e.RecordingInbox()
		var want []string
		publish := func(id string) {
			t.Helper()
			src.publish(t, e.Ctx, id, "order-1")
			want = append(want, id+"@1")
		}

		p := inboxtest.NewProxy(t, u.Host)
		reconnected := make(chan struct{}, 10)
		nc, err := nats.Connect("nats://"+p.Addr(), nats.MaxReconnects(-1),
			nats.ReconnectWait(10*time.Millisecond), nats.ReconnectJitter(0, 0),
			nats.ReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} }))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		rjs, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		cons, err := rjs.Consumer(e.Ctx, src.stream, "inbox")
		if err != nil {
			t.Fatal(err)
		}
		r, err := New(Config{Inbox: in, Consumer: cons, Logger: inboxtest.Quiet})
		if err != nil {
			t.Fatal(err)
		}
		r.afterStore = func(m jetstream.Msg) {
			if meta, err := m.Metadata(); err == nil && m.Headers().Get(jetstream.MsgIDHeader) == "m1" && meta.NumDelivered == 1 {
				p.Cut() // dies before its ack
			}
		}
		for i := range 3 {
			publish(fmt.Sprintf("m%d", i))
		}
		e.Go("receiver", r.Run)
		e.Go("inbox", in.Run)
		e.WaitFor("three handled", func() bool { return in.Relay().Stats().Delivered == 3 })
		inboxtest.Await(t, e.Ctx, "a reconnect", reconnected, 1)

		p.Cut() // while idle
		inboxtest.Await(t, e.Ctx, "a reconnect", reconnected, 1)
		publish("m3")
		e.WaitFor("m3 handled", func() bool { return in.Relay().Stats().Delivered == 4 })
		if got := e.Handled()["order-1"]; !slices.Equal(got, want) {
			t.Errorf("handled %v, want %v", got, want)
		}
		if n := e.Counter("backstop_inbox_received_total", "source", "nats"); n != 4 {
			t.Errorf("received_total = %d, want 4", n)
		}
	})
}

// TestConsumerDeletedUnderTheReceiver: an operator deletes the durable
// consumer while the receiver reads it. Before, Run returned nil and the
// source stopped for good, silently. Now it keeps trying, and once the
// consumer is back it takes the messages published meanwhile.
func TestConsumerDeletedUnderTheReceiver(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	inboxtest.ForEachStore(t, func(t *testing.T, k inboxtest.Kind) {
		rs := startResuming(t, k, js)
		e, src, in, publish, retries := rs.e, rs.src, rs.in, rs.publish, rs.retries

		if err := js.DeleteConsumer(e.Ctx, src.stream, "inbox"); err != nil {
			t.Fatal(err)
		}
		inboxtest.Await(t, e.Ctx, "the receiver to retry", retries, 1)
		publish("m1")
		// The operator puts the consumer back, from m1 on.
		if _, err := js.CreateOrUpdateConsumer(e.Ctx, src.stream, jetstream.ConsumerConfig{Durable: "inbox",
			AckPolicy: jetstream.AckExplicitPolicy, AckWait: 2 * time.Second, MaxAckPending: 1,
			DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: 2}); err != nil {
			t.Fatal(err)
		}
		e.WaitFor("m1 handled", func() bool { return in.Relay().Stats().Delivered == 2 })
		if got := e.Handled()["order-1"]; !slices.Equal(got, []string{"m0@1", "m1@1"}) {
			t.Errorf("handled %v, want m0 then m1", got)
		}
	})
}

// TestStreamDeletedAndCreatedAgain: an operator deletes the whole stream
// (its consumer with it) and creates both again, as a redeploy of the
// stream's definition does. The receiver keeps trying while they are
// gone and reads the new consumer once they are back.
func TestStreamDeletedAndCreatedAgain(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	inboxtest.ForEachStore(t, func(t *testing.T, k inboxtest.Kind) {
		rs := startResuming(t, k, js)
		e, src, in, publish, retries := rs.e, rs.src, rs.in, rs.publish, rs.retries

		if err := js.DeleteStream(e.Ctx, src.stream); err != nil {
			t.Fatal(err)
		}
		inboxtest.Await(t, e.Ctx, "the receiver to retry", retries, 1)
		createAgain(t, e.Ctx, js, src)
		// The new stream numbers from 1 again; m0's id is already in the
		// inbox, so publishing it again must not handle it twice.
		publish("m0")
		publish("m1")
		e.WaitFor("m1 handled", func() bool { return in.Relay().Stats().Delivered == 2 })
		if got := e.Handled()["order-1"]; !slices.Equal(got, []string{"m0@1", "m1@1"}) {
			t.Errorf("handled %v, want m0 then m1, each once", got)
		}
	})
}

// A publisher that sets no Nats-Msg-Id: the receiver's id for a message
// must not be taken again by a message of the stream created anew, which
// numbers from 1 again (with "<stream>:<sequence>" the second new message
// was dropped as a duplicate of the old second one, for the DedupWindow).
func TestStreamCreatedAgainWithoutMessageIDs(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	inboxtest.ForEachStore(t, func(t *testing.T, k inboxtest.Kind) {
		rs := startResuming(t, k, js) // m0, sequence 1, handled
		e, src, in, publish, retries := rs.e, rs.src, rs.in, rs.publish, rs.retries
		publish("") // sequence 2
		e.WaitFor("the second message handled", func() bool { return in.Relay().Stats().Delivered == 2 })
		if err := js.DeleteStream(e.Ctx, src.stream); err != nil {
			t.Fatal(err)
		}
		inboxtest.Await(t, e.Ctx, "the receiver to retry", retries, 1)
		createAgain(t, e.Ctx, js, src)
		publish("") // sequence 1 of the new stream
		publish("") // sequence 2, as the old second message
		e.WaitFor("both new messages handled", func() bool { return in.Relay().Stats().Delivered == 4 })
		ids := map[string]bool{}
		for _, h := range e.Handled()["order-1"] {
			ids[h] = true
		}
		if len(ids) != 4 {
			t.Errorf("handled %v, want four messages, each once", e.Handled()["order-1"])
		}
	})
}

// createAgain puts back src's stream and its consumer, as a redeploy does.
func createAgain(t *testing.T, ctx context.Context, js jetstream.JetStream, src *source) {
	t.Helper()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: src.stream, Subjects: []string{src.prefix + ".>"},
		Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, src.stream, jetstream.ConsumerConfig{Durable: "inbox",
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 2 * time.Second, MaxAckPending: 1}); err != nil {
		t.Fatal(err)
	}
}

// resuming is a receiver retrying fast on a test's source, with its inbox
// recording order.created messages of stream order-1, both running, and
// m0 already handled.
type resuming struct {
	e       *inboxtest.Env
	src     *source
	in      *inbox.Inbox
	publish func(id string)
	retries chan struct{} // signalled when the receiver starts retrying
}

func startResuming(t *testing.T, k inboxtest.Kind, js jetstream.JetStream) *resuming {
	t.Helper()
	e := inboxtest.NewEnv(t, k)
	src := newSource(t, e.Ctx, js, 2*time.Second)
	in := e.RecordingInbox()
	publish := func(id string) {
		t.Helper()
		src.publish(t, e.Ctx, id, "order-1")
	}
	r, err := New(Config{Inbox: in, Consumer: src.consumer, Logger: inboxtest.Quiet,
		RetryDelay: 5 * time.Millisecond, MaxRetryDelay: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	retries := make(chan struct{}, 1)
	r.retrying = func() {
		select {
		case retries <- struct{}{}:
		default:
		}
	}
	e.Go("receiver", r.Run)
	e.Go("inbox", in.Run)
	publish("m0")
	e.WaitFor("m0 handled", func() bool { return in.Relay().Stats().Delivered == 1 })
	return &resuming{e: e, src: src, in: in, publish: publish, retries: retries}
}

// TestAckWaitOverTheDedupWindowIsRefused: a consumer that waits longer
// for an acknowledgement (AckWait, or a BackOff step) than the inbox
// remembers an id delivers a message whose acknowledgement was lost (a
// connection dropped mid-ack) again after its id was forgotten: it was
// stored and handled a second time. Run now refuses such a consumer,
// naming both settings.
func TestAckWaitOverTheDedupWindowIsRefused(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	e := inboxtest.NewEnv(t, inboxtest.Kinds[0])
	src := newSource(t, e.Ctx, js, 30*time.Second)
	cfg := e.Config()
	cfg.DedupWindow = time.Minute
	in, err := inbox.New(e.S, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []jetstream.ConsumerConfig{
		{Durable: "long-wait", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 2 * time.Minute},
		{Durable: "long-backoff", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Second, MaxDeliver: 3,
			BackOff: []time.Duration{time.Second, 5 * time.Minute}},
	} {
		cons, err := js.CreateOrUpdateConsumer(e.Ctx, src.stream, c)
		if err != nil {
			t.Fatal(err)
		}
		r, err := New(Config{Inbox: in, Consumer: cons, Logger: inboxtest.Quiet})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(e.Ctx, 3*time.Second)
		err = r.Run(ctx)
		cancel()
		if err == nil || !strings.Contains(err.Error(), "DedupWindow") || !strings.Contains(err.Error(), "AckWait") {
			t.Errorf("%s: Run = %v, want an error naming AckWait and DedupWindow", c.Durable, err)
		}
	}
}
