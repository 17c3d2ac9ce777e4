package natstransport_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/transport/transporttest"
)

// natsURL is the server the tests use.
func natsURL() string { return testenv.NATSURL() }

// connect dials the test server for the test's own use (setting up
// streams, reading back). It skips the test when the server is not
// reachable, or fails it when CI=true.
func connect(t *testing.T) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(natsURL(), nats.Timeout(2*time.Second))
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
	testenv.Unreachable(t, "NATS JetStream at "+natsURL(), testenv.NATSEnv, err)
	return nil, nil
}

// ctxFor returns a context that ends with the test or after 15 seconds.
func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// unique returns a name no other test uses, usable as a stream name and
// as a subject token.
func unique(prefix string) string {
	return prefix + "_" + strings.ReplaceAll(uuid.NewString(), "-", "")
}

// newStream creates a stream capturing "<prefix>.>" and deletes it when
// the test ends. It returns the stream and its subject prefix.
func newStream(t *testing.T, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, string) {
	t.Helper()
	prefix := unique("bt")
	cfg.Name = strings.ToUpper(prefix)
	cfg.Subjects = []string{prefix + ".>"}
	cfg.Storage = jetstream.MemoryStorage
	ctx := ctxFor(t)
	s, err := js.CreateStream(ctx, cfg)
	if err != nil {
		t.Fatalf("create stream %s: %v", cfg.Name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, cfg.Name); err != nil {
			t.Errorf("delete stream %s: %v", cfg.Name, err)
		}
	})
	return s, prefix
}

// readBack records every message of s into a Recorder, through an
// ordered consumer that stops when the test ends.
func readBack(t *testing.T, s jetstream.Stream) *transporttest.Recorder {
	t.Helper()
	rec := transporttest.NewRecorder()
	cons, err := s.OrderedConsumer(ctxFor(t), jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatalf("ordered consumer: %v", err)
	}
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		rec.Record(delivery(msg))
	})
	if err != nil {
		t.Fatalf("consume: %v", err)
	}
	t.Cleanup(cc.Stop)
	return rec
}

// delivery turns a stored message back into what the suite compares.
func delivery(msg jetstream.Msg) transporttest.Delivery {
	h := msg.Headers()
	headers := make(map[string]string, len(h))
	for k := range h {
		headers[k] = h.Get(k)
	}
	return transporttest.Delivery{
		ID:      h.Get(jetstream.MsgIDHeader),
		Stream:  h.Get("Backstop-Stream"),
		Type:    h.Get("Backstop-Type"),
		Payload: msg.Data(),
		Headers: headers,
	}
}

// message returns a new message.
func message(t *testing.T) *outbox.Message {
	t.Helper()
	id, err := uuid.NewV7()
	if err != nil {
		t.Fatal(err)
	}
	return &outbox.Message{ID: id, Destination: "orders", Stream: "order-1", Type: "order.created", Payload: []byte(`{"id":1}`)}
}

// wantFault checks how the default classifier sees err.
func wantFault(t *testing.T, err error, class errorhandling.Class, blame errorhandling.Blame, code string) {
	t.Helper()
	if err == nil {
		t.Fatalf("err = nil, want a %v fault", class)
	}
	v := errorhandling.NewErrorClassifier().Classify(err)
	if v.Class != class || v.Blame != blame || (code != "" && v.Code != code) {
		t.Fatalf("Classify(%v) = class %v, blame %v, code %q; want %v, %v, %q", err, v.Class, v.Blame, v.Code, class, blame, code)
	}
}
