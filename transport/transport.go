// Package transport is how the relay hands a message to its destination.
//
// A Transport delivers one message and reports the outcome as an error
// that errorhandling's classifier understands: each transport maps its own
// failures to fault classes and blame (a refused connection is a transient
// fault of the destination; a 400 is a permanent fault of the message).
// Backstop ships webhook (HTTP), NATS JetStream, RabbitMQ and Go-handler
// transports; every transport passes the suite in transport/transporttest.
package transport

import (
	"context"

	"github.com/backstophq/backstop/outbox"
)

// Transport delivers messages to one destination.
//
// Deliver must be safe for concurrent use. It returns nil only once the
// destination has durably accepted the message (an HTTP 2xx, a JetStream
// ack, a RabbitMQ publisher confirm). Otherwise it returns an error that
// says, through errorhandling's wrappers or the classifier's built-in
// rules, whether the fault is transient or permanent and whom to blame.
// Deliver must honour ctx: when ctx is done it gives up and returns an
// error wrapping ctx.Err().
//
// Delivery is at least once: a message may be delivered again after a
// crash between delivery and the store recording it. Transports pass the
// message id to destinations that can de-duplicate (JetStream's
// Nats-Msg-Id, the webhook's webhook-id header).
type Transport interface {
	Deliver(ctx context.Context, m *outbox.Message) error
	// Close releases connections. Deliver must not be called after Close.
	Close() error
}

// Func adapts a function to Transport: the Go-handler transport for
// in-process side effects. Its errors are classified like any other.
type Func func(ctx context.Context, m *outbox.Message) error

// Deliver calls f.
func (f Func) Deliver(ctx context.Context, m *outbox.Message) error { return f(ctx, m) }

// Close does nothing.
func (Func) Close() error { return nil }

// Attempt returns the number of the delivery attempt about to be made for
// m: one more than the failed attempts charged to it.
func Attempt(m *outbox.Message) int { return m.Attempts + 1 }

// sendGuardKey is the context key of WithSendGuard.
type sendGuardKey struct{}

// WithSendGuard returns a copy of ctx carrying guard, which a transport
// asks (CheckSend) as late as it can before a message leaves the process.
// The relay sets one that fails once its lease on the message has lapsed:
// a relay process stopped (SIGSTOP, a paused VM) after it checked the
// lease and continued after the lease lapsed would otherwise send a copy
// of a message that another instance may have delivered since, with later
// messages of its stream.
func WithSendGuard(ctx context.Context, guard func() error) context.Context {
	return context.WithValue(ctx, sendGuardKey{}, guard)
}

// CheckSend returns ctx's error, else the error of the guard ctx carries
// (WithSendGuard), if any, each also matching ErrNotSent. A transport
// calls it right before the message leaves the process, and sends nothing
// when it returns an error: Deliver then returns an error wrapping it.
func CheckSend(ctx context.Context) error {
	err := ctx.Err()
	if guard, ok := ctx.Value(sendGuardKey{}).(func() error); ok && guard != nil && err == nil {
		err = guard()
	}
	if err != nil {
		return notSent{err}
	}
	return nil
}
