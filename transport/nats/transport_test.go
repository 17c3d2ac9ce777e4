package natstransport_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/transport"
	natstransport "github.com/backstophq/backstop/transport/nats"
)

// newTransport returns a transport publishing to "<prefix>.<type>" and
// closes it when the test ends.
func newTransport(t *testing.T, cfg natstransport.Config) *natstransport.Transport {
	t.Helper()
	if cfg.URL == "" && cfg.Conn == nil {
		cfg.URL = natsURL()
	}
	tr, err := natstransport.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

func TestResendIsDeduplicated(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	s, prefix := newStream(t, js, jetstream.StreamConfig{Duplicates: time.Minute})
	tr := newTransport(t, natstransport.Config{Subject: prefix + ".{type}"})
	m := message(t)
	ctx := ctxFor(t)
	for i := range 3 {
		if err := tr.Deliver(ctx, m); err != nil {
			t.Fatalf("Deliver #%d: %v", i+1, err)
		}
		m.Attempts++ // a retry after a lost acknowledgement
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("stream holds %d messages after three deliveries of one id, want 1", info.State.Msgs)
	}
}

func TestHeaders(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	s, prefix := newStream(t, js, jetstream.StreamConfig{})
	rec := readBack(t, s)
	tr := newTransport(t, natstransport.Config{Subject: prefix + ".{destination}.{stream}.{type}"})
	m := message(t)
	m.Attempts = 2
	m.Headers = map[string]string{"X-Tenant": "acme", "Backstop-Message-Id": "forged"}
	ctx := ctxFor(t)
	if err := tr.Deliver(ctx, m); err != nil {
		t.Fatal(err)
	}
	got, err := rec.Received(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	h := got[0].Headers
	for k, want := range map[string]string{
		"Nats-Msg-Id":         m.ID.String(),
		"Backstop-Message-Id": m.ID.String(),
		"Backstop-Stream":     "order-1",
		"Backstop-Type":       "order.created",
		"Backstop-Attempt":    "3",
		"X-Tenant":            "acme",
	} {
		if h[k] != want {
			t.Errorf("header %s = %q, want %q (all: %v)", k, h[k], want, h)
		}
	}
	if !bytes.Equal(got[0].Payload, m.Payload) {
		t.Errorf("payload = %q, want %q", got[0].Payload, m.Payload)
	}
}

func TestSubjectFunc(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	s, prefix := newStream(t, js, jetstream.StreamConfig{})
	tr := newTransport(t, natstransport.Config{
		SubjectFunc: func(m *outbox.Message) string { return prefix + ".custom." + m.Destination },
	})
	ctx := ctxFor(t)
	if err := tr.Deliver(ctx, message(t)); err != nil {
		t.Fatal(err)
	}
	msg, err := s.GetLastMsgForSubject(ctx, prefix+".custom.orders")
	if err != nil {
		t.Fatalf("no message on the custom subject: %v", err)
	}
	if msg.Header.Get("Backstop-Type") != "order.created" {
		t.Fatalf("headers = %v", msg.Header)
	}
}

func TestNoStreamIsTransientDestinationFault(t *testing.T) {
	t.Parallel()
	connect(t)
	tr := newTransport(t, natstransport.Config{Subject: unique("bt_nostream") + ".{type}"})
	err := tr.Deliver(ctxFor(t), message(t))
	wantFault(t, err, errorhandling.ClassTransient, errorhandling.BlameDestination, "no_stream")
}

func TestMessageLargerThanStreamAllowsIsPermanent(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	_, prefix := newStream(t, js, jetstream.StreamConfig{MaxMsgSize: 256})
	tr := newTransport(t, natstransport.Config{Subject: prefix + ".{type}"})
	m := message(t)
	m.Payload = bytes.Repeat([]byte("x"), 1024)
	err := tr.Deliver(ctxFor(t), m)
	wantFault(t, err, errorhandling.ClassPermanent, errorhandling.BlameMessage, "message_too_large")
}

func TestMessageLargerThanServerAllowsIsPermanent(t *testing.T) {
	t.Parallel()
	nc, js := connect(t)
	_, prefix := newStream(t, js, jetstream.StreamConfig{})
	// Limits above the server's, so that the server's max_payload decides.
	tr := newTransport(t, natstransport.Config{Subject: prefix + ".{type}", Limits: outbox.Limits{MaxPayloadBytes: 64 << 20}})
	m := message(t)
	m.Payload = make([]byte, nc.MaxPayload()+1)
	err := tr.Deliver(ctxFor(t), m)
	wantFault(t, err, errorhandling.ClassPermanent, errorhandling.BlameMessage, "message_too_large")
}

func TestFullStreamIsTransientDestinationFault(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	_, prefix := newStream(t, js, jetstream.StreamConfig{MaxMsgs: 1, Discard: jetstream.DiscardNew})
	tr := newTransport(t, natstransport.Config{Subject: prefix + ".{type}"})
	ctx := ctxFor(t)
	if err := tr.Deliver(ctx, message(t)); err != nil {
		t.Fatal(err)
	}
	err := tr.Deliver(ctx, message(t))
	wantFault(t, err, errorhandling.ClassTransient, errorhandling.BlameDestination, "")
	if !strings.Contains(err.Error(), "maximum messages") {
		t.Errorf("error %q does not say the stream is full", err)
	}
}

func TestExpectedStream(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	s, _ := newStream(t, js, jetstream.StreamConfig{})
	_, otherPrefix := newStream(t, js, jetstream.StreamConfig{})
	name := s.CachedInfo().Config.Name

	// The subject is captured by another stream than the one configured.
	tr := newTransport(t, natstransport.Config{Subject: otherPrefix + ".{type}", Stream: name})
	err := tr.Deliver(ctxFor(t), message(t))
	wantFault(t, err, errorhandling.ClassTransient, errorhandling.BlameDestination, "jetstream_10060")

	// A stream that does not exist is refused at New.
	_, err = natstransport.New(natstransport.Config{URL: natsURL(), Stream: unique("MISSING")})
	if err == nil || !strings.Contains(err.Error(), "Config.Stream") || !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("New with a missing stream = %v, want an error naming Config.Stream", err)
	}
}

func TestInvalidSubjectIsPermanentMessageFault(t *testing.T) {
	t.Parallel()
	connect(t)
	tr := newTransport(t, natstransport.Config{Subject: "bt.{stream}.{type}"})
	m := message(t)
	m.Stream = "" // an empty token
	wantFault(t, tr.Deliver(ctxFor(t), m), errorhandling.ClassPermanent, errorhandling.BlameMessage, "invalid_subject")
	m.Stream = "a b"
	wantFault(t, tr.Deliver(ctxFor(t), m), errorhandling.ClassPermanent, errorhandling.BlameMessage, "invalid_subject")
	m.Stream = "*"
	wantFault(t, tr.Deliver(ctxFor(t), m), errorhandling.ClassPermanent, errorhandling.BlameMessage, "invalid_subject")
}

func TestNoAckIsTimeout(t *testing.T) {
	t.Parallel()
	nc, _ := connect(t)
	// A plain subscriber takes the request and never answers, as a stream
	// whose leader is gone would.
	subject := unique("bt_silent") + ".x"
	sub, err := nc.SubscribeSync(subject)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	tr := newTransport(t, natstransport.Config{Subject: subject, Timeout: 50 * time.Millisecond})
	err = tr.Deliver(ctxFor(t), message(t))
	wantFault(t, err, errorhandling.ClassTransient, errorhandling.BlameDestination, "timeout")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want it to wrap context.DeadlineExceeded", err)
	}
}

func TestClosedConnectionIsTransientDestinationFault(t *testing.T) {
	t.Parallel()
	connect(t)
	tr := newTransport(t, natstransport.Config{})
	_ = tr.Close()
	err := tr.Deliver(ctxFor(t), message(t))
	wantFault(t, err, errorhandling.ClassTransient, errorhandling.BlameDestination, "connection_closed")
}

func TestCallerOwnedConnectionStaysOpen(t *testing.T) {
	t.Parallel()
	nc, js := connect(t)
	_, prefix := newStream(t, js, jetstream.StreamConfig{})
	tr := newTransport(t, natstransport.Config{Conn: nc, Subject: prefix + ".x"})
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if nc.IsClosed() {
		t.Fatal("Close closed the caller's connection")
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  natstransport.Config
		want string
	}{
		{natstransport.Config{}, "Config.URL"},
		{natstransport.Config{URL: "nats://127.0.0.1:1", Timeout: -time.Second}, "Config.Timeout"},
		{natstransport.Config{URL: "nats://127.0.0.1:1", Stream: "a.b"}, "Config.Stream"},
		{natstransport.Config{URL: "nats://127.0.0.1:1", Limits: outbox.Limits{MaxHeaders: -1}}, "Config.Limits"},
	} {
		_, err := natstransport.New(c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v) = %v, want an error mentioning %s", c.cfg, err, c.want)
		} else if strings.Contains(err.Error(), "secret") {
			t.Errorf("New error %q shows the password", err)
		}
	}
}

// A connection the client closed for good (a credential refused twice in a
// row while reconnecting, an -ERR from the server) is dialed again by the
// next Deliver. Before, every later Deliver failed with "connection closed"
// until the program restarted, even once the server took the credential
// again: the destination's breaker stayed open for good.
func TestConnectionClosedForGoodIsDialedAgain(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	s, prefix := newStream(t, js, jetstream.StreamConfig{})
	tr := newTransport(t, natstransport.Config{Subject: prefix + ".{type}"})
	ctx := ctxFor(t)
	if err := tr.Deliver(ctx, message(t)); err != nil {
		t.Fatal(err)
	}
	natstransport.CloseConnection(tr)
	if err := tr.Deliver(ctx, message(t)); err != nil {
		t.Fatalf("Deliver after the client closed the connection: %v", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Fatalf("stream holds %d messages, want 2", info.State.Msgs)
	}
	// Close still ends it for good.
	_ = tr.Close()
	wantFault(t, tr.Deliver(ctx, message(t)), errorhandling.ClassTransient, errorhandling.BlameDestination, "connection_closed")
}

// A subject longer than the server's protocol line takes is refused before
// publishing, as a fault of the message. Before, the server answered
// "maximum control line exceeded" and the client closed the connection for
// good: the message failed as a transient fault of the destination (never
// dead-lettered, tried again forever), the publishes in flight beside it
// failed, and so did every later Deliver.
func TestSubjectTooLongIsRefusedBeforePublishing(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	s, prefix := newStream(t, js, jetstream.StreamConfig{})
	tr := newTransport(t, natstransport.Config{SubjectFunc: func(m *outbox.Message) string {
		if m.Type == "long" {
			return prefix + "." + strings.Repeat("s", 5000)
		}
		if m.Type == "longest" {
			return prefix + "." + strings.Repeat("s", natstransport.MaxSubjectLen-len(prefix)-1)
		}
		return prefix + ".ok"
	}})
	ctx := ctxFor(t)
	m := message(t)
	m.Type = "long"
	err := tr.Deliver(ctx, m)
	wantFault(t, err, errorhandling.ClassPermanent, errorhandling.BlameMessage, "invalid_subject")
	if !errors.Is(err, transport.ErrNotSent) {
		t.Errorf("err = %v, want it to match transport.ErrNotSent", err)
	}
	m = message(t)
	m.Type = "longest"
	if err := tr.Deliver(ctx, m); err != nil {
		t.Fatalf("Deliver to a subject of MaxSubjectLen bytes: %v", err)
	}
	if err := tr.Deliver(ctx, message(t)); err != nil {
		t.Fatalf("Deliver after the long subject: %v", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Fatalf("stream holds %d messages, want 2", info.State.Msgs)
	}
}

// A message over the server's max_payload is refused by the client before
// anything is written, also while the server is down (the client checks
// against the max_payload it last heard of): its error matches
// transport.ErrNotSent, so that the relay's breaker does not count it and
// a probe of an open circuit that ends so does not close the circuit.
func TestMessageOverServerMaxPayloadIsNotSent(t *testing.T) {
	t.Parallel()
	nc, js := connect(t)
	_, prefix := newStream(t, js, jetstream.StreamConfig{})
	tr := newTransport(t, natstransport.Config{Subject: prefix + ".{type}", Limits: outbox.Limits{MaxPayloadBytes: 64 << 20}})
	m := message(t)
	m.Payload = make([]byte, nc.MaxPayload()+1)
	err := tr.Deliver(ctxFor(t), m)
	wantFault(t, err, errorhandling.ClassPermanent, errorhandling.BlameMessage, "message_too_large")
	if !errors.Is(err, transport.ErrNotSent) {
		t.Fatalf("err = %v, want it to match transport.ErrNotSent", err)
	}
}

// A message larger than its whole stream's max_bytes, with discard new, is
// refused with the same "maximum bytes exceeded" as a full stream; it was
// retried for ever as the destination's fault. It is the message's: it
// could not fit even in the empty stream. A message that fits an empty
// stream but not this one's remaining bytes is still the destination's.
func TestMessageLargerThanTheWholeStreamIsPermanent(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	_, prefix := newStream(t, js, jetstream.StreamConfig{MaxBytes: 1024, Discard: jetstream.DiscardNew})
	tr := newTransport(t, natstransport.Config{Subject: prefix + ".{type}"})
	ctx := ctxFor(t)
	big := message(t)
	big.Payload = bytes.Repeat([]byte("x"), 2000)
	err := tr.Deliver(ctx, big)
	wantFault(t, err, errorhandling.ClassPermanent, errorhandling.BlameMessage, "message_too_large")
	if !strings.Contains(err.Error(), "holds at most 1024") {
		t.Errorf("error %q does not give the stream's limit", err)
	}

	// Fill the stream, then one that would fit an empty stream.
	for i := 0; ; i++ {
		m := message(t)
		m.Payload = bytes.Repeat([]byte("y"), 300)
		err = tr.Deliver(ctx, m)
		if err != nil || i > 10 {
			break
		}
	}
	wantFault(t, err, errorhandling.ClassTransient, errorhandling.BlameDestination, "stream_full")
	if !strings.Contains(err.Error(), "maximum bytes") || !strings.Contains(err.Error(), "is full") {
		t.Errorf("error %q does not say the stream is full", err)
	}
	if !errors.Is(err, transport.ErrNoRoom) {
		t.Errorf("error %q does not match transport.ErrNoRoom", err)
	}
}
