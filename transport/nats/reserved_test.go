package natstransport_test

import (
	"strconv"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop/errorhandling"
	natstransport "github.com/backstophq/backstop/transport/nats"
)

// TestReservedHeadersAreDropped: a message's Nats-* headers do not reach
// JetStream unless the destination allows them, and Nats-Msg-Id is the
// message id either way.
func TestReservedHeadersAreDropped(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	s, prefix := newStream(t, js, jetstream.StreamConfig{})
	ctx := ctxFor(t)

	strict := newTransport(t, natstransport.Config{Subject: prefix + ".{type}"})
	m := message(t)
	m.Headers = map[string]string{
		"Nats-Expected-Last-Sequence": "999", // would be refused: the stream is empty
		"nats-msg-id":                 "forged",
		"X-Tenant":                    "acme",
	}
	if err := strict.Deliver(ctx, m); err != nil {
		t.Fatalf("Deliver with reserved headers dropped: %v", err)
	}
	stored, err := s.GetLastMsgForSubject(ctx, prefix+".order.created")
	if err != nil {
		t.Fatal(err)
	}
	h := stored.Header
	// nats.Header is case-sensitive: the message's lower-case copy must
	// be gone, not merely shadowed.
	if _, forged := h["nats-msg-id"]; forged || h.Get("Nats-Msg-Id") != m.ID.String() || h.Get("X-Tenant") != "acme" {
		t.Fatalf("stored headers %v: want Nats-Msg-Id the message id, no nats-msg-id, X-Tenant kept", h)
	}
	if v := h.Get("Nats-Expected-Last-Sequence"); v != "" {
		t.Fatalf("Nats-Expected-Last-Sequence reached the stream: %q", v)
	}

	// Allowed, the expectation reaches JetStream, which refuses the
	// publish: the message's own fault.
	lax := newTransport(t, natstransport.Config{Subject: prefix + ".{type}", AllowReservedHeaders: true})
	refused := message(t)
	refused.Headers = map[string]string{"Nats-Expected-Last-Sequence": "999"}
	wantFault(t, lax.Deliver(ctx, refused), errorhandling.ClassPermanent, errorhandling.BlameMessage, "")

	// An expectation that holds passes.
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ok := message(t)
	ok.Headers = map[string]string{"Nats-Expected-Last-Sequence": strconv.FormatUint(info.State.LastSeq, 10), "nats-msg-id": "forged"}
	if err := lax.Deliver(ctx, ok); err != nil {
		t.Fatalf("Deliver with a true expectation: %v", err)
	}
	stored, err = s.GetLastMsgForSubject(ctx, prefix+".order.created")
	if err != nil {
		t.Fatal(err)
	}
	if _, forged := stored.Header["nats-msg-id"]; forged || stored.Header.Get("Nats-Msg-Id") != ok.ID.String() {
		t.Fatalf("headers %v: want Nats-Msg-Id the message id even with reserved headers allowed", stored.Header)
	}
}

func TestIsReservedHeader(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		"Nats-Msg-Id": true, "nats-expected-stream": true, "NATS-TTL": true, "Nats-": true,
		"Nats": false, "X-Nats-Id": false, "Backstop-Type": false, "": false,
	} {
		if got := natstransport.IsReservedHeader(name); got != want {
			t.Errorf("IsReservedHeader(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestBackstopHeadersCannotBeForged: a message header named like one of
// Backstop's in another case is dropped (nats.Header is case-sensitive:
// it travelled beside the real one), and Backstop's carry the truth.
func TestBackstopHeadersCannotBeForged(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	s, prefix := newStream(t, js, jetstream.StreamConfig{})
	ctx := ctxFor(t)
	m := message(t)
	m.Headers = map[string]string{"backstop-message-id": "forged", "BACKSTOP-TYPE": "forged",
		"Backstop-Attempt": "99", "backstop-stream": "forged", "X-Tenant": "acme"}
	if err := newTransport(t, natstransport.Config{Subject: prefix + ".{type}"}).Deliver(ctx, m); err != nil {
		t.Fatal(err)
	}
	stored, err := s.GetLastMsgForSubject(ctx, prefix+".order.created")
	if err != nil {
		t.Fatal(err)
	}
	h := stored.Header
	for k, vs := range h {
		for _, v := range vs {
			if v == "forged" || v == "99" {
				t.Errorf("header %s: %q reached the stream (all: %v)", k, v, h)
			}
		}
	}
	if h.Get(natstransport.HeaderMessageID) != m.ID.String() || h.Get(natstransport.HeaderType) != m.Type || h.Get("X-Tenant") != "acme" {
		t.Fatalf("headers %v: want Backstop's true values and X-Tenant kept", h)
	}
}
