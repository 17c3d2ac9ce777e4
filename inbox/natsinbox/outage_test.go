package natsinbox

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop/inbox"
	"github.com/backstophq/backstop/inbox/internal/inboxtest"
	"github.com/backstophq/backstop/store"
)

// TestStoreOutageDoesNotUseUpMaxDeliver takes the inbox's PostgreSQL
// store away (a proxy that refuses connections) while a message arrives
// on a consumer with MaxDeliver 2, and brings it back after the receiver
// failed to store the message three times: the message is then stored
// and handled. Before, every failure refused it with a Nak, which spends
// one of the consumer's deliveries: after the second JetStream gave up
// on it for good, and a database outage longer than MaxDeliver × NakDelay
// lost every message that arrived during it, acknowledged by nobody and
// stored nowhere.
func TestStoreOutageDoesNotUseUpMaxDeliver(t *testing.T) {
	t.Parallel()
	o := newOutage(t, 2)
	o.e.Go("receiver", o.r.Run)
	o.p.Refuse()
	o.src.publish(t, o.e.Ctx, "m1", "s")
	e, in, cons := o.e, o.in, o.cons
	if !inboxtest.Within(15*time.Second, o.failures, 3) {
		info, err := cons.Info(e.Ctx)
		t.Fatalf("the receiver stopped trying to store the message (consumer %+v, %v): JetStream gave up on it after MaxDeliver", info, err)
	}
	o.p.Accept()
	e.Go("inbox", in.Run)
	e.WaitHandled(in, "s", "m1@1")
}

// TestStopDuringAStoreOutageGivesBackAtOnce stops a receiver that holds a
// message it cannot store (its PostgreSQL store refuses connections) and
// starts another on the same connection once the store is back: the
// message comes to it at once, not after the consumer's AckWait (30 s).
// It was refused with a Nak as soon as the first receiver's iterator
// stopped, and JetStream redelivered it at once to that iterator's pull,
// which it had not yet forgotten: nobody read delivery 2, and delivery 3
// came AckWait later.
func TestStopDuringAStoreOutageGivesBackAtOnce(t *testing.T) {
	t.Parallel()
	o := newOutage(t, 0)
	stop := o.e.Start("receiver", o.r.Run)
	o.p.Refuse()
	o.src.publish(t, o.e.Ctx, "m1", "s")
	if !inboxtest.Within(15*time.Second, o.failures, 2) {
		t.Fatal("the receiver did not try to store the message")
	}
	stop()
	o.p.Accept()
	r2, err := New(Config{Inbox: o.in, Consumer: o.cons, Logger: inboxtest.Quiet})
	if err != nil {
		t.Fatal(err)
	}
	o.e.Go("receiver", r2.Run)
	o.e.Go("inbox", o.in.Run)
	deadline := time.Now().Add(15 * time.Second)
	o.e.WaitFor("m1 handled", func() bool {
		if time.Now().After(deadline) {
			t.Fatalf("m1 not handled within 15 s of the first receiver's stop: it waits for the consumer's AckWait")
		}
		return o.in.Relay().Stats().Delivered == 1
	})
}

// outage is a receiver whose inbox stores in PostgreSQL through a proxy
// the test can make refuse connections, on a consumer with AckWait 30 s,
// MaxAckPending 1 and maxDeliver (0: no limit); failures signals each
// failed try to store a message.
type outage struct {
	e        *inboxtest.Env
	p        *inboxtest.Proxy
	src      *source
	cons     jetstream.Consumer
	in       *inbox.Inbox
	r        *Receiver
	failures <-chan struct{}
}

func newOutage(t *testing.T, maxDeliver int) *outage {
	t.Helper()
	_, js := connect(t)
	o := &outage{e: inboxtest.NewEnv(t, inboxtest.Kinds[1])}
	var s store.Store
	s, o.p = o.e.StoreThroughProxy()
	o.src = newSource(t, o.e.Ctx, js, 30*time.Second)
	var err error
	o.cons, err = js.CreateOrUpdateConsumer(o.e.Ctx, o.src.stream, jetstream.ConsumerConfig{Durable: "inbox",
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxAckPending: 1, MaxDeliver: maxDeliver})
	if err != nil {
		t.Fatal(err)
	}
	if o.in, err = inbox.New(s, o.e.Config()); err != nil {
		t.Fatal(err)
	}
	o.in.Handle("order.created", o.e.Record)
	log, failures := inboxtest.SignalOn("cannot store a received message")
	o.failures = failures
	if o.r, err = New(Config{Inbox: o.in, Consumer: o.cons, Logger: log, NakDelay: 10 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	return o
}
