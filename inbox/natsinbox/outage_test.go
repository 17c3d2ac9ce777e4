package natsinbox

import (
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop/inbox"
	"github.com/backstophq/backstop/inbox/internal/inboxtest"
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
	_, js := connect(t)
	e := inboxtest.NewEnv(t, inboxtest.Kinds[1])
	s, p := e.StoreThroughProxy()
	src := newSource(t, e.Ctx, js, 30*time.Second)
	cons, err := js.CreateOrUpdateConsumer(e.Ctx, src.stream, jetstream.ConsumerConfig{Durable: "inbox",
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxAckPending: 1, MaxDeliver: 2})
	if err != nil {
		t.Fatal(err)
	}
	in, err := inbox.New(s, e.Config())
	if err != nil {
		t.Fatal(err)
	}
	in.Handle("order.created", e.Record)
	log, failures := inboxtest.SignalOn("cannot store a received message")
	r, err := New(Config{Inbox: in, Consumer: cons, Logger: log, NakDelay: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	e.Go("receiver", r.Run)
	p.Refuse()
	src.publish(t, e.Ctx, "m1", "s")
	if !inboxtest.Within(15*time.Second, failures, 3) {
		info, err := cons.Info(e.Ctx)
		t.Fatalf("the receiver stopped trying to store the message (consumer %+v, %v): JetStream gave up on it after MaxDeliver", info, err)
	}
	p.Accept()
	e.Go("inbox", in.Run)
	e.WaitFor("m1 handled", func() bool { return in.Relay().Stats().Delivered == 1 })
	if got := e.Handled()["s"]; !slices.Equal(got, []string{"m1@1"}) {
		t.Errorf("handled %v, want m1 once", got)
	}
}
