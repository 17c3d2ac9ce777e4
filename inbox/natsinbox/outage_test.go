package natsinbox

import (
	"context"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop/inbox"
	"github.com/backstophq/backstop/inbox/internal/inboxtest"
	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/postgres"
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
	in.Handle("order.created", func(ctx context.Context, tx store.Tx, msg *inbox.Message) error {
		return e.Record(ctx, tx, msg)
	})
	log, failures := inboxtest.SignalOn("cannot store a received message")
	r, err := New(Config{Inbox: in, Consumer: cons, Logger: log, NakDelay: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	e.Go("receiver", r.Run)
	p.Refuse()
	m := nats.NewMsg(src.prefix + ".order")
	m.Header.Set(jetstream.MsgIDHeader, "m1")
	m.Header.Set(HeaderType, "order.created")
	m.Header.Set(HeaderStream, "s")
	if _, err := js.PublishMsg(e.Ctx, m); err != nil {
		t.Fatal(err)
	}
	deadline := time.NewTimer(15 * time.Second)
	defer deadline.Stop()
	for range 3 {
		select {
		case <-failures:
		case <-deadline.C:
			info, err := cons.Info(e.Ctx)
			t.Fatalf("the receiver stopped trying to store the message (consumer %+v, %v): JetStream gave up on it after MaxDeliver", info, err)
		}
	}
	p.Accept()
	e.Go("inbox", in.Run)
	e.WaitFor("m1 handled", func() bool { return in.Relay().Stats().Delivered == 1 })
	if got := e.Handled()["s"]; !slices.Equal(got, []string{"m1@1"}) {
		t.Errorf("handled %v, want m1 once", got)
	}
}
