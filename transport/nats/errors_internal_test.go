package natstransport

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
)

// TestClassify covers the failures the integration tests cannot provoke
// on a healthy single server.
func TestClassify(t *testing.T) {
	t.Parallel()
	api := func(status, code int, desc string) error {
		return fmt.Errorf("nats: %w", &jetstream.APIError{Code: status, ErrorCode: jetstream.ErrorCode(code), Description: desc})
	}
	const (
		transient = errorhandling.ClassTransient
		permanent = errorhandling.ClassPermanent
		dest      = errorhandling.BlameDestination
		msg       = errorhandling.BlameMessage
	)
	for _, c := range []struct {
		name  string
		err   error
		class errorhandling.Class
		blame errorhandling.Blame
		code  string
	}{
		{"no stream", jetstream.ErrNoStreamResponse, transient, dest, "no_stream"},
		{"no responders", nats.ErrNoResponders, transient, dest, "no_stream"},
		{"nats timeout", nats.ErrTimeout, transient, dest, "timeout"},
		{"reconnecting", nats.ErrConnectionReconnecting, transient, dest, "connection_closed"},
		{"draining", nats.ErrConnectionDraining, transient, dest, "connection_closed"},
		{"max payload", nats.ErrMaxPayload, permanent, msg, "message_too_large"},
		{"bad header", nats.ErrBadHeaderMsg, permanent, msg, "invalid_message"},
		{"stream full", api(503, 10077, "maximum messages exceeded"), transient, dest, "stream_full"},
		{"subject full", api(503, 10077, "maximum messages per subject exceeded"), transient, dest, "stream_full"},
		{"stream bytes full", api(503, 10077, "maximum bytes exceeded"), transient, dest, "jetstream_10077"},
		{"insufficient resources", api(503, 10023, "insufficient resources"), transient, dest, "jetstream_10023"},
		{"sealed", api(400, 10109, "invalid operation on sealed stream"), transient, dest, "jetstream_10109"},
		{"wrong stream", api(400, 10060, "expected stream does not match"), transient, dest, "jetstream_10060"},
		{"account quota full", api(400, 10002, "resource limits exceeded for account"), transient, dest, "jetstream_10002"},
		{"no JetStream for the account", api(503, 10039, "jetstream not enabled for account"), transient, dest, "jetstream_10039"},
		{"no JetStream", api(503, 10076, "jetstream not enabled"), transient, dest, "jetstream_10076"},
		{"too large", api(400, 10054, "message size exceeds maximum allowed"), permanent, msg, "message_too_large"},
		{"header too large", api(400, 10097, "header size exceeds maximum allowed of 64k"), permanent, msg, "message_too_large"},
		{"wrong last sequence", api(400, 10071, "wrong last sequence: 4"), permanent, msg, "jetstream_10071"},
		{"invalid ack", jetstream.ErrInvalidJSAck, transient, dest, ""},
		{"other", errors.New("boom"), transient, dest, ""},
	} {
		err := classify(context.Background(), fmt.Errorf("natstransport: publish: %w", c.err))
		v := errorhandling.NewErrorClassifier().Classify(err)
		if v.Class != c.class || v.Blame != c.blame || v.Code != c.code {
			t.Errorf("%s: classified %v/%v/%q, want %v/%v/%q", c.name, v.Class, v.Blame, v.Code, c.class, c.blame, c.code)
		}
		if !errors.Is(err, c.err) {
			t.Errorf("%s: %v does not wrap %v", c.name, err, c.err)
		}
	}
}

// TestClassifyWrapsCallerContext: when the caller's context is done, the
// error wraps its error whatever the publish reported.
func TestClassifyWrapsCallerContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := classify(ctx, nats.ErrConnectionClosed)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, nats.ErrConnectionClosed) {
		t.Fatalf("err = %v, want it to wrap context.Canceled and the publish error", err)
	}
}

func TestSubjectTemplate(t *testing.T) {
	t.Parallel()
	tr := &Transport{cfg: Config{Subject: DefaultSubject}}
	m := &outbox.Message{ID: uuid.MustParse("0190a0b0-c0d0-7000-8000-000000000001"), Destination: "orders", Type: "order.created"}
	if got := tr.subject(m); got != "backstop.orders.order.created" {
		t.Errorf("subject = %q", got)
	}
	tr.cfg.Subject = "x.{stream}.{id}"
	m2 := *m
	m2.Stream = "{type}" // not expanded again
	if got, want := tr.subject(&m2), "x.{type}."+m.ID.String(); got != want {
		t.Errorf("subject = %q, want %q", got, want)
	}
	for s, ok := range map[string]bool{"a.b": true, "a": true, "": false, "a..b": false, ".a": false, "a.": false, "a.*": false, "a.>": false, "a b": false, "a\x7f": false} {
		if err := checkSubject(s); (err == nil) != ok {
			t.Errorf("checkSubject(%q) = %v", s, err)
		}
	}
}
