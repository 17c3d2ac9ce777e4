package webhook_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/transport"
	"github.com/backstophq/backstop/transport/webhook"
)

var errGone = errors.New("the lease lapsed (test)")

// TestSendGuardRefusesLateSends: a delivery whose send guard fails
// (transport.WithSendGuard; the relay's, once its lease lapsed) sends
// nothing: when the guard fails before the call, and when it fails only
// as the client reads the body, right before the request leaves (a relay
// process continued after a stop past its lease). Deliver's error matches
// the guard's and transport.ErrNotSent; the receiver never gets a whole
// request.
func TestSendGuardRefusesLateSends(t *testing.T) {
	t.Parallel()
	// A raw listener, so that any byte that arrives is seen, not only
	// requests a server would hand to a handler.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var bytesSeen, requests atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					if _, err := br.Peek(1); err != nil {
						return
					}
					bytesSeen.Add(1)
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					if _, err := io.ReadAll(req.Body); err != nil {
						return // cut short: a receiver cannot verify or use it
					}
					requests.Add(1)
					_, _ = c.Write([]byte("HTTP/1.1 204 No Content\r\n\r\n"))
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	tr, err := webhook.New(webhook.Config{URL: "http://" + ln.Addr().String() + "/hooks", Secret: []byte("k")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	msg := func(payload string) *outbox.Message {
		return &outbox.Message{ID: uuid.New(), Destination: "d", Type: "t", Payload: []byte(payload)}
	}

	// The guard passes: the request goes.
	ok := transport.WithSendGuard(context.Background(), func() error { return nil })
	if err := tr.Deliver(ok, msg(`{"a":1}`)); err != nil {
		t.Fatalf("with the guard passing: %v", err)
	}
	if requests.Load() != 1 {
		t.Fatalf("with the guard passing the receiver saw %d requests, want 1", requests.Load())
	}
	bytesSeen.Store(0)

	// In this order: the refusal as the body is read leaves header bytes
	// that the listener reads after Deliver returned, which a case after
	// it would take for its own.
	for _, c := range []struct {
		name   string
		failAt int64
	}{{"before the call", 1}, {"as the body is read", 2}} {
		name, failAt := c.name, c.failAt
		var asked atomic.Int64
		ctx := transport.WithSendGuard(context.Background(), func() error {
			if asked.Add(1) >= failAt {
				return errGone
			}
			return nil
		})
		payloads := []string{`{"a":2}`}
		if failAt == 1 {
			// An empty body is never read: the check before the call is
			// its only one.
			payloads = append(payloads, "")
		}
		for _, payload := range payloads {
			seen := bytesSeen.Load()
			err := tr.Deliver(ctx, msg(payload))
			if !errors.Is(err, errGone) || !errors.Is(err, transport.ErrNotSent) {
				t.Errorf("guard failing %s, payload %q: Deliver = %v, want the guard's error and ErrNotSent", name, payload, err)
			}
			if failAt == 1 && bytesSeen.Load() != seen {
				t.Errorf("guard failing before the call, payload %q: the receiver saw bytes", payload)
			}
			asked.Store(0)
		}
	}
	// A request the transport sent whole would have reached the listener
	// before Deliver returned (it waits for the answer); none did. (When
	// the guard fails as the body is read, the client has flushed the
	// headers already: the receiver sees a request whose body never
	// comes.)
	if requests.Load() != 1 {
		t.Errorf("after the refused deliveries the receiver read %d whole requests in all, want only the first", requests.Load())
	}
}
