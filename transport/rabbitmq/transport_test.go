package rabbitmq_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/transport"
	"github.com/backstophq/backstop/transport/rabbitmq"
)

// newTransport returns a transport and closes it when the test ends.
func newTransport(t *testing.T, cfg rabbitmq.Config) *rabbitmq.Transport {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = amqpURL()
	}
	tr, err := rabbitmq.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

func TestPersistentMessageIsConfirmedWithHeaders(t *testing.T) {
	t.Parallel()
	a := connect(t)
	ex := a.exchange(unique("bt.ex"))
	_, raw := a.readBack(a.queue(ex, "order.created", nil))
	tr := newTransport(t, rabbitmq.Config{Exchange: ex})
	m := message(t)
	m.Attempts = 1
	m.Headers = map[string]string{"X-Tenant": "acme", "Backstop-Type": "forged"}
	ctx := ctxFor(t)
	if err := tr.Deliver(ctx, m); err != nil {
		t.Fatalf("Deliver: %v", err)
	}
	d := raw.next(t, ctx)
	if d.DeliveryMode != amqp.Persistent {
		t.Errorf("delivery mode = %d, want persistent", d.DeliveryMode)
	}
	if d.MessageId != m.ID.String() || d.Type != m.Type || d.RoutingKey != "order.created" || string(d.Body) != string(m.Payload) {
		t.Errorf("got id %q type %q key %q body %q", d.MessageId, d.Type, d.RoutingKey, d.Body)
	}
	for k, want := range map[string]string{
		"Backstop-Message-Id": m.ID.String(),
		"Backstop-Type":       "order.created",
		"Backstop-Stream":     "order-1",
		"Backstop-Attempt":    "2",
		"X-Tenant":            "acme",
	} {
		if got, _ := d.Headers[k].(string); got != want {
			t.Errorf("header %s = %v, want %q (all: %v)", k, d.Headers[k], want, d.Headers)
		}
	}
}

func TestNonPersistentAndDefaultExchange(t *testing.T) {
	t.Parallel()
	a := connect(t)
	q := a.queue("", "", nil)
	_, raw := a.readBack(q)
	// The default exchange routes to the queue named by the routing key.
	tr := newTransport(t, rabbitmq.Config{
		RoutingKeyFunc: func(*outbox.Message) string { return q },
		NonPersistent:  true,
	})
	ctx := ctxFor(t)
	if err := tr.Deliver(ctx, message(t)); err != nil {
		t.Fatalf("Deliver: %v", err)
	}
	if d := raw.next(t, ctx); d.DeliveryMode != amqp.Transient {
		t.Errorf("delivery mode = %d, want transient", d.DeliveryMode)
	}
}

func TestUnroutableIsTransientDestinationFault(t *testing.T) {
	t.Parallel()
	a := connect(t)
	ex := a.exchange(unique("bt.ex")) // no queue bound
	tr := newTransport(t, rabbitmq.Config{Exchange: ex})
	ctx := ctxFor(t)
	err := tr.Deliver(ctx, message(t))
	wantFault(t, err, errorhandling.ClassTransient, errorhandling.BlameDestination, "unroutable")
	if !errors.Is(err, rabbitmq.ErrUnroutable) {
		t.Errorf("err = %v, want ErrUnroutable", err)
	}
	// The channel stays usable: a routable message goes through next.
	_, raw := a.readBack(a.queue(ex, "#", nil))
	m := message(t)
	if err := tr.Deliver(ctx, m); err != nil {
		t.Fatalf("Deliver after binding a queue: %v", err)
	}
	if d := raw.next(t, ctx); d.MessageId != m.ID.String() {
		t.Fatalf("got %s, want %s", d.MessageId, m.ID)
	}

	// With AllowUnroutable the broker confirms and drops it.
	lax := newTransport(t, rabbitmq.Config{Exchange: ex, RoutingKey: "nobody", AllowUnroutable: true})
	if err := lax.Deliver(ctx, message(t)); err != nil {
		t.Fatalf("Deliver with AllowUnroutable: %v", err)
	}
}

func TestMissingExchangeThenDeclared(t *testing.T) {
	t.Parallel()
	a := connect(t)
	ex := a.exchange(unique("bt.ex"))
	tr := newTransport(t, rabbitmq.Config{Exchange: ex})
	if err := a.ch.ExchangeDelete(ex, false, false); err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t)
	err := tr.Deliver(ctx, message(t))
	wantFault(t, err, errorhandling.ClassTransient, errorhandling.BlameDestination, "not_found")
	var amqpErr *amqp.Error
	if !errors.As(err, &amqpErr) || amqpErr.Code != amqp.NotFound {
		t.Errorf("err = %v, want the broker's 404", err)
	}

	// An operator declares the exchange again: the next Deliver works on
	// a fresh channel.
	a.exchange(ex)
	_, raw := a.readBack(a.queue(ex, "#", nil))
	m := message(t)
	if err := tr.Deliver(ctx, m); err != nil {
		t.Fatalf("Deliver after the exchange was declared: %v", err)
	}
	if d := raw.next(t, ctx); d.MessageId != m.ID.String() {
		t.Fatalf("got %s, want %s", d.MessageId, m.ID)
	}
}

func TestReconnectsAfterConnectionLoss(t *testing.T) {
	t.Parallel()
	a := connect(t)
	ex := a.exchange(unique("bt.ex"))
	_, raw := a.readBack(a.queue(ex, "#", nil))
	tr := newTransport(t, rabbitmq.Config{Exchange: ex})
	ctx := ctxFor(t)
	for i := range 3 {
		m := message(t)
		if err := tr.Deliver(ctx, m); err != nil {
			t.Fatalf("Deliver #%d: %v", i, err)
		}
		if d := raw.next(t, ctx); d.MessageId != m.ID.String() {
			t.Fatalf("got %s, want %s", d.MessageId, m.ID)
		}
		rabbitmq.DropConnection(tr)
	}
}

func TestNackIsTransientDestinationFault(t *testing.T) {
	t.Parallel()
	a := connect(t)
	ex := a.exchange(unique("bt.ex"))
	a.queue(ex, "#", amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"})
	tr := newTransport(t, rabbitmq.Config{Exchange: ex})
	ctx := ctxFor(t)
	if err := tr.Deliver(ctx, message(t)); err != nil {
		t.Fatalf("first Deliver: %v", err)
	}
	// The queue took a body of this size: it refuses this one for lack
	// of room.
	err := tr.Deliver(ctx, message(t))
	wantFault(t, err, errorhandling.ClassTransient, errorhandling.BlameDestination, "queue_full")
	if !errors.Is(err, rabbitmq.ErrNacked) || !errors.Is(err, transport.ErrNoRoom) {
		t.Errorf("err = %v, want ErrNacked and transport.ErrNoRoom", err)
	}
}

// TestNackOfMessageOverQueueByteLimit: a message larger than any its
// routing key took may be over a queue's x-max-length-bytes: its nack is
// not taken for a lack of room, and its error gives its size.
func TestNackOfMessageOverQueueByteLimit(t *testing.T) {
	t.Parallel()
	a := connect(t)
	ex := a.exchange(unique("bt.ex"))
	a.queue(ex, "#", amqp.Table{"x-max-length-bytes": int32(1024), "x-overflow": "reject-publish"})
	tr := newTransport(t, rabbitmq.Config{Exchange: ex})
	ctx := ctxFor(t)
	if err := tr.Deliver(ctx, message(t)); err != nil {
		t.Fatalf("first Deliver: %v", err)
	}
	big := message(t)
	big.Payload = bytes.Repeat([]byte("x"), 4096)
	err := tr.Deliver(ctx, big)
	wantFault(t, err, errorhandling.ClassTransient, errorhandling.BlameDestination, "nack")
	if !errors.Is(err, rabbitmq.ErrNacked) || errors.Is(err, transport.ErrNoRoom) {
		t.Errorf("err = %v, want ErrNacked and not transport.ErrNoRoom", err)
	}
	if !strings.Contains(err.Error(), "4096-byte body") {
		t.Errorf("err = %v, want the body's size", err)
	}
}

func TestInvalidMessageIsPermanentMessageFault(t *testing.T) {
	t.Parallel()
	connect(t)
	tr := newTransport(t, rabbitmq.Config{RoutingKey: "{stream}.{type}", Limits: outbox.Limits{MaxTypeLen: 1000}})
	for name, m := range map[string]*outbox.Message{
		"routing key": func() *outbox.Message {
			m := message(t)
			m.Stream = strings.Repeat("s", 200)
			m.Type = strings.Repeat("t", 60)
			return m
		}(),
		"type":   func() *outbox.Message { m := message(t); m.Type = strings.Repeat("t", 256); return m }(),
		"stream": func() *outbox.Message { m := message(t); m.Stream = "a\nb"; return m }(),
		"header name": func() *outbox.Message {
			m := message(t)
			m.Headers = map[string]string{strings.Repeat("h", 256): "v"}
			return m
		}(),
	} {
		err := tr.Deliver(ctxFor(t), m)
		if v := errorhandling.NewErrorClassifier().Classify(err); v.Class != errorhandling.ClassPermanent || v.Blame != errorhandling.BlameMessage {
			t.Errorf("%s too long: Deliver = %v, classified %v/%v; want a permanent fault of the message", name, err, v.Class, v.Blame)
		}
	}
}

func TestDeliverAfterClose(t *testing.T) {
	t.Parallel()
	connect(t)
	tr := newTransport(t, rabbitmq.Config{})
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	err := tr.Deliver(ctxFor(t), message(t))
	wantFault(t, err, errorhandling.ClassTransient, errorhandling.BlameDestination, "closed")
	if !errors.Is(err, rabbitmq.ErrClosed) {
		t.Errorf("err = %v, want ErrClosed", err)
	}
}

func TestNewChecks(t *testing.T) {
	t.Parallel()
	connect(t)
	for _, c := range []struct {
		cfg  rabbitmq.Config
		want string
	}{
		{rabbitmq.Config{}, "Config.URL"},
		{rabbitmq.Config{URL: "http://x"}, "Config.URL"},
		{rabbitmq.Config{URL: amqpURL(), Timeout: -time.Second}, "Config.Timeout"},
		{rabbitmq.Config{URL: amqpURL(), Channels: -1}, "Config.Channels"},
		{rabbitmq.Config{URL: amqpURL(), Limits: outbox.Limits{MaxPayloadBytes: -1}}, "Config.Limits"},
		{rabbitmq.Config{URL: amqpURL(), Exchange: unique("bt.missing")}, "Config.Exchange"},
	} {
		_, err := rabbitmq.New(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v) = %v, want an error mentioning %s", c.cfg, err, c.want)
		} else if strings.Contains(err.Error(), "secret") {
			t.Errorf("New error %q shows the password", err)
		}
	}
}

// Headers whose content header frame exceeds the broker's frame_max are
// refused before publishing, as a fault of the message. Before, the broker
// closed the whole connection (501 FRAME_ERROR): the message failed as a
// transient fault of the destination, never dead-lettered and tried again
// forever, and every Deliver in flight on the connection failed with it.
// A frame of exactly frame_max is still published.
func TestHeadersOverFrameMaxAreRefusedBeforePublishing(t *testing.T) {
	t.Parallel()
	a := connect(t)
	frameMax := a.conn.Config.FrameSize
	if frameMax <= 0 {
		t.Skipf("the broker sets no frame_max (%d)", frameMax)
	}
	q := a.queue("", "", nil)
	rec, _ := a.readBack(q)
	tr := newTransport(t, rabbitmq.Config{RoutingKey: q, Limits: outbox.Limits{MaxHeaderBytes: 1 << 20}})
	ctx := ctxFor(t)

	fits := message(t)
	fits.Headers = map[string]string{"Big": ""}
	fits.Headers["Big"] = strings.Repeat("v", frameMax-rabbitmq.HeaderFrameSize(tr, fits))
	if got := rabbitmq.HeaderFrameSize(tr, fits); got != frameMax {
		t.Fatalf("header frame of %d bytes, want %d", got, frameMax)
	}
	if err := tr.Deliver(ctx, fits); err != nil {
		t.Fatalf("Deliver of a header frame of frame_max (%d) bytes: %v", frameMax, err)
	}

	over := message(t)
	over.Headers = map[string]string{"Big": fits.Headers["Big"] + strings.Repeat("v", 1024)}
	err := tr.Deliver(ctx, over)
	wantFault(t, err, errorhandling.ClassPermanent, errorhandling.BlameMessage, "invalid_message")
	if !errors.Is(err, transport.ErrNotSent) {
		t.Errorf("err = %v, want it to match transport.ErrNotSent", err)
	}
	if err := tr.Deliver(ctx, message(t)); err != nil {
		t.Fatalf("Deliver after the refused message: %v", err)
	}
	if _, err := rec.Received(ctx, 2); err != nil {
		t.Fatal(err)
	}
}
