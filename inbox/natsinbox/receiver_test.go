package natsinbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/inbox"
	"github.com/backstophq/backstop/inbox/internal/inboxtest"
	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
	natstransport "github.com/backstophq/backstop/transport/nats"
)

// connect dials the test server, or skips (fails under CI=true).
func connect(t *testing.T) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(testenv.NATSURL(), nats.Timeout(2*time.Second))
	if err == nil {
		var js jetstream.JetStream
		if js, err = jetstream.New(nc); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if _, err = js.AccountInfo(ctx); err == nil {
				t.Cleanup(nc.Close)
				return nc, js
			}
		}
		nc.Close()
	}
	testenv.Unreachable(t, "NATS JetStream at "+testenv.NATSURL(), testenv.NATSEnv, err)
	return nil, nil
}

// source is a test's stream and durable consumer.
type source struct {
	js       jetstream.JetStream
	stream   string
	prefix   string // subjects are <prefix>.<type>
	consumer jetstream.Consumer
}

// newSource creates a stream with a 100 ms duplicate window (the least (so that the
// JetStream allows), so that the test can publish one message id twice,
// and a durable consumer with
// explicit acks, one message in flight at a time, redelivered after
// ackWait; both are deleted when the test ends.
func newSource(t *testing.T, ctx context.Context, js jetstream.JetStream, ackWait time.Duration) *source {
	t.Helper()
	prefix := "inboxtest_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	name := strings.ToUpper(prefix)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{prefix + ".>"},
		Storage: jetstream.MemoryStorage, Duplicates: 100 * time.Millisecond}); err != nil {
		t.Fatalf("create stream: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, name)
	})
	c, err := js.CreateOrUpdateConsumer(ctx, name, jetstream.ConsumerConfig{Durable: "inbox",
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, MaxAckPending: 1})
	if err != nil {
		t.Fatalf("create consumer: %v", err)
	}
	return &source{js: js, stream: name, prefix: prefix, consumer: c}
}

// publish publishes an order.created message of stream to s, with the
// Nats-Msg-Id id, or none when id is "" (the receiver then makes one of
// the stream, its sequence and time).
func (s *source) publish(t *testing.T, ctx context.Context, id, stream string) {
	t.Helper()
	m := nats.NewMsg(s.prefix + ".order.created")
	if id != "" {
		m.Header.Set(jetstream.MsgIDHeader, id)
	}
	m.Header.Set(HeaderType, "order.created")
	m.Header.Set(HeaderStream, stream)
	if _, err := s.js.PublishMsg(ctx, m); err != nil {
		t.Fatalf("publish %q: %v", id, err)
	}
}

// publishAgain publishes a message with the id of one published before,
// once JetStream's duplicate window has passed: it acknowledges a
// re-publish inside the window as a duplicate without storing it, and the
// test tries again every 20 ms until JetStream stores it.
func (s *source) publishAgain(t *testing.T, ctx context.Context, m *nats.Msg) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ack, err := s.js.PublishMsg(ctx, m)
		if err != nil {
			t.Fatalf("publish again: %v", err)
		}
		if !ack.Duplicate {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-tick.C:
		}
	}
}

// orderMessages are two streams of outbox messages as service A writes
// them.
func orderMessages(n int) []*outbox.Message {
	var ms []*outbox.Message
	for i := range n {
		for _, stream := range []string{"order-1", "order-2"} {
			ms = append(ms, &outbox.Message{ID: uuid.Must(uuid.NewV7()), Destination: "orders", Type: "order.created",
				Stream: stream, Payload: []byte(fmt.Sprintf(`{"n":%d}`, i)), Headers: map[string]string{"X-Tenant": "acme"}})
		}
	}
	return ms
}

// TestReceiveOnce publishes through Backstop's NATS transport, forces the
// source to deliver messages again (a Nak after storing, the same
// Nats-Msg-Id published twice), and checks that each message is handled
// once, in its stream's order; a handler failure is retried, a poison
// message dead-lettered with its reason, and a message that cannot be
// stored terminated.
func TestReceiveOnce(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	inboxtest.ForEachStore(t, func(t *testing.T, k inboxtest.Kind) {
		e := inboxtest.NewEnv(t, k)
		src := newSource(t, e.Ctx, js, 30*time.Second)
		in := e.NewInbox(e.Config())
		var mu sync.Mutex
		tries := map[string]int{}
		in.Handle("order.created", func(ctx context.Context, tx store.Tx, msg *inbox.Message) error {
			mu.Lock()
			tries[msg.ID]++
			n := tries[msg.ID]
			mu.Unlock()
			if msg.Headers["X-Tenant"] != "acme" {
				return errorhandling.Permanent(fmt.Errorf("headers %v", msg.Headers))
			}
			if err := e.Record(ctx, tx, msg); err != nil {
				return err
			}
			if n == 1 && strings.HasSuffix(string(msg.Payload), `"n":1}`) {
				return errors.New("stock service busy") // retried after a minute
			}
			return nil
		})
		in.Handle("order.poison", func(ctx context.Context, tx store.Tx, msg *inbox.Message) error {
			return fmt.Errorf("order %s has no lines", msg.Payload)
		})

		tr, err := natstransport.New(natstransport.Config{Conn: js.Conn(), Subject: src.prefix + ".{type}", Stream: src.stream})
		if err != nil {
			t.Fatal(err)
		}
		msgs := orderMessages(3)
		for _, m := range msgs {
			if err := tr.Deliver(e.Ctx, m); err != nil {
				t.Fatalf("publish: %v", err)
			}
		}
		poison := &outbox.Message{ID: uuid.Must(uuid.NewV7()), Destination: "orders", Type: "order.poison", Stream: "order-9"}
		if err := tr.Deliver(e.Ctx, poison); err != nil {
			t.Fatal(err)
		}
		// The first message again, as a publisher retrying after the
		// duplicate window would.
		again := nats.NewMsg(src.prefix + ".order.created")
		again.Data = msgs[0].Payload // the same message: another body would be another message under its id
		again.Header.Set(jetstream.MsgIDHeader, msgs[0].ID.String())
		again.Header.Set(HeaderType, "order.created")
		again.Header.Set(HeaderStream, "order-1")
		again.Header.Set("X-Tenant", "acme")
		src.publishAgain(t, e.Ctx, again)
		// A message of another publisher: no Nats-Msg-Id, no Backstop
		// headers (its type is its subject), and one that cannot be
		// stored (a control character in its type).
		plain := nats.NewMsg(src.prefix + ".ping")
		plain.Header.Set("X-Tenant", "acme")
		// A header a message cannot carry is left out; the message is
		// kept (it was terminated, never stored).
		plain.Header["X-Trace"] = []string{"a\x01b"}
		// So are the headers past the inbox's limits (64 by default): the
		// message was terminated for them.
		for i := range 70 {
			plain.Header.Set(fmt.Sprintf("Z-Extra-%02d", i), "v")
		}
		if _, err := js.PublishMsg(e.Ctx, plain); err != nil {
			t.Fatal(err)
		}
		bad := nats.NewMsg(src.prefix + ".bad")
		bad.Header.Set(HeaderType, "order\x01created")
		if _, err := js.PublishMsg(e.Ctx, bad); err != nil {
			t.Fatal(err)
		}
		var pinged sync.WaitGroup
		pinged.Add(1)
		in.HandleFunc(src.prefix+".ping", func(ctx context.Context, msg *inbox.Message) error {
			if !strings.HasPrefix(msg.ID, src.stream+":") {
				return errorhandling.Permanent(fmt.Errorf("id %q, want <stream>:<seq>", msg.ID))
			}
			if _, ok := msg.Headers["X-Trace"]; ok || msg.Headers["X-Tenant"] != "acme" {
				return errorhandling.Permanent(fmt.Errorf("headers %v, want X-Tenant without X-Trace", msg.Headers))
			}
			if _, ok := msg.Headers["Z-Extra-63"]; ok || msg.Headers["Z-Extra-62"] != "v" {
				return errorhandling.Permanent(fmt.Errorf("headers %v, want Z-Extra-00 to -62 (64 with X-Tenant)", msg.Headers))
			}
			pinged.Done()
			return nil
		})

		r, err := New(Config{Inbox: in, Consumer: src.consumer, Logger: inboxtest.Quiet})
		if err != nil {
			t.Fatal(err)
		}
		var nakked sync.Map
		r.ack = func(m jetstream.Msg) bool {
			// The first delivery of every message of order-2 is stored
			// and then refused: JetStream delivers it again.
			if m.Headers().Get(HeaderStream) != "order-2" {
				return true
			}
			_, seen := nakked.LoadOrStore(m.Headers().Get(jetstream.MsgIDHeader), true)
			return seen
		}
		e.Go("receiver", r.Run)
		e.Go("inbox", in.Run)

		e.WaitFor("all handled", func() bool {
			s := in.Relay().Stats()
			return s.Delivered == int64(len(msgs))+1 && s.DeadLettered == 1
		})
		pinged.Wait()
		got := e.Handled()
		for _, stream := range []string{"order-1", "order-2"} {
			var want []string
			for _, m := range msgs {
				if m.Stream == stream {
					attempt := 1
					if strings.HasSuffix(string(m.Payload), `"n":1}`) {
						attempt = 2
					}
					want = append(want, fmt.Sprintf("%s@%d", m.ID, attempt))
				}
			}
			if !slices.Equal(got[stream], want) {
				t.Errorf("stream %s handled %v, want %v", stream, got[stream], want)
			}
		}
		if n := e.Counter("backstop_inbox_duplicates_total", "source", "nats"); n != 4 {
			t.Errorf("duplicates_total = %d, want 4 (3 Nak'd redeliveries, 1 re-publish)", n)
		}
		if n := e.Counter("backstop_inbox_received_total", "source", "nats"); n != len(msgs)+2 {
			t.Errorf("received_total = %d, want %d", n, len(msgs)+2)
		}
		if n := e.Counter("backstop_inbox_rejected_total", "source", "nats"); n != 1 {
			t.Errorf("rejected_total = %d, want 1", n)
		}
		if n := e.Refused(); n != 1 {
			t.Errorf("%d refused messages kept as dead letters, want 1", n)
		}
		e.CheckPoisoned("has no lines")
		e.WaitFor("the consumer to have nothing pending", func() bool {
			info, err := src.consumer.Info(e.Ctx)
			return err == nil && info.NumAckPending == 0 && info.NumPending == 0
		})
	})
}
