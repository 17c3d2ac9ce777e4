package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/backstophq/backstop/errorhandling"
)

// TestClassify covers the failures the integration tests cannot provoke
// on a healthy broker.
func TestClassify(t *testing.T) {
	t.Parallel()
	const (
		transient = errorhandling.ClassTransient
		permanent = errorhandling.ClassPermanent
		dest      = errorhandling.BlameDestination
		msg       = errorhandling.BlameMessage
	)
	server := func(code int, reason string) error { return &amqp.Error{Code: code, Reason: reason, Server: true} }
	for _, c := range []struct {
		name  string
		err   error
		class errorhandling.Class
		blame errorhandling.Blame
		code  string
	}{
		{"unroutable", ErrUnroutable, transient, dest, "unroutable"},
		{"nack", ErrNacked, transient, dest, "nack"},
		{"nack of a body its key took", nacked(10, 20), transient, dest, "queue_full"},
		{"nack of a body larger than its key took", nacked(30, 20), transient, dest, "nack"},
		{"closed transport", ErrClosed, transient, dest, "closed"},
		{"confirm timeout", context.DeadlineExceeded, transient, dest, "timeout"},
		{"closed channel", amqp.ErrClosed, transient, dest, "connection_closed"},
		{"no exchange", server(amqp.NotFound, "NOT_FOUND - no exchange 'x'"), transient, dest, "not_found"},
		{"access refused", server(amqp.AccessRefused, "ACCESS_REFUSED"), transient, dest, "access_refused"},
		{"credentials", amqp.ErrCredentials, transient, dest, "access_refused"},
		{"too large", server(amqp.PreconditionFailed, "PRECONDITION_FAILED - message size 200 is larger than configured max size 100"), permanent, msg, "rejected"},
		{"forced close", server(amqp.ConnectionForced, "CONNECTION_FORCED - broker forced connection closure"), transient, dest, "amqp_320"},
		{"refused", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, transient, dest, "connection_refused"},
		{"other", errors.New("boom"), transient, dest, ""},
	} {
		err := classify(context.Background(), fmt.Errorf("rabbitmq: publish: %w", c.err))
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
	err := classify(ctx, amqp.ErrClosed)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, amqp.ErrClosed) {
		t.Fatalf("err = %v, want it to wrap context.Canceled and the publish error", err)
	}
}
