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
	o := newOutage(t, 2, 30*time.Second)
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
	o := newOutage(t, 0, 30*time.Second)
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

// TestHungStoreDoesNotUseUpMaxDeliver freezes the inbox's PostgreSQL
// store (a proxy that holds every byte: a server that hangs, a network
// that drops packets) while a message arrives on a consumer with AckWait
// 500 ms and MaxDeliver 2, and thaws it after four AckWaits: the message
// is then stored and handled, delivered once. Before, the receiver sent
// nothing to JetStream while its try to store the message hung, so the
// message was redelivered every AckWait, spending MaxDeliver: a hang
// longer than MaxDeliver × AckWait left a message JetStream had given up
// on, held only in the receiver's memory.
func TestHungStoreDoesNotUseUpMaxDeliver(t *testing.T) {
	t.Parallel()
	const ackWait = 500 * time.Millisecond
	o := newOutage(t, 2, ackWait)
	e, in, cons := o.e, o.in, o.cons
	e.Go("receiver", o.r.Run)
	o.p.Freeze()
	o.src.publish(t, e.Ctx, "m1", "s")
	delivered := func() uint64 {
		info, err := cons.Info(e.Ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.Delivered.Consumer
	}
	// Polled every 50 ms, not at WaitFor's pace: each look asks the server.
	poll := func(what string, cond func() bool) {
		t.Helper()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for !cond() {
			select {
			case <-e.Ctx.Done():
				t.Fatalf("waiting for %s: %v", what, e.Ctx.Err())
			case <-tick.C:
			}
		}
	}
	poll("m1 delivered to the receiver", func() bool { return delivered() == 1 })
	hung := time.Now()
	poll("four AckWaits of the hung store", func() bool {
		if n := delivered(); n > 1 {
			t.Fatalf("m1 delivered %d times while the store hung: the receiver let its AckWait run out", n)
		}
		return time.Since(hung) > 4*ackWait
	})
	o.p.Thaw()
	e.Go("inbox", in.Run)
	e.WaitHandled(in, "s", "m1@1")
	if n := delivered(); n != 1 {
		t.Errorf("m1 delivered %d times, want once", n)
	}
}

// TestStoreOutageWithAShortAckWait takes the inbox's store away while a
// message arrives on a consumer whose AckWait (1 s) is shorter than the
// receiver's NakDelay (1.5 s), with MaxDeliver 2, and brings it back
// after three failed tries: the message is stored and handled, delivered
// once. The receiver restarted the message's AckWait only once per
// NakDelay, so with such a consumer every wait let it run out: JetStream
// delivered the message again each time and gave up on it after
// MaxDeliver, as if the receiver had not held it at all.
func TestStoreOutageWithAShortAckWait(t *testing.T) {
	t.Parallel()
	o := newOutage(t, 2, time.Second)
	e, in, cons := o.e, o.in, o.cons
	r, err := New(Config{Inbox: in, Consumer: cons, Logger: o.r.cfg.Logger, NakDelay: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	e.Go("receiver", r.Run)
	o.p.Refuse()
	o.src.publish(t, e.Ctx, "m1", "s")
	if !inboxtest.Within(15*time.Second, o.failures, 3) {
		t.Fatal("the receiver stopped trying to store the message")
	}
	info, err := cons.Info(e.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := info.Delivered.Consumer; n != 1 {
		t.Fatalf("m1 delivered %d times during the outage, want once: the receiver let its AckWait run out", n)
	}
	o.p.Accept()
	e.Go("inbox", in.Run)
	e.WaitHandled(in, "s", "m1@1")
}

// outage is a receiver whose inbox stores in PostgreSQL through a proxy
// the test can make refuse connections, on a consumer with ackWait,
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

func newOutage(t *testing.T, maxDeliver int, ackWait time.Duration) *outage {
	t.Helper()
	_, js := connect(t)
	o := &outage{e: inboxtest.NewEnv(t, inboxtest.Kinds[1])}
	var s store.Store
	s, o.p = o.e.StoreThroughProxy()
	o.src = newSource(t, o.e.Ctx, js, 30*time.Second)
	var err error
	o.cons, err = js.CreateOrUpdateConsumer(o.e.Ctx, o.src.stream, jetstream.ConsumerConfig{Durable: "inbox",
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, MaxAckPending: 1, MaxDeliver: maxDeliver})
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
