package rabbitmq

import (
	"context"
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/transport"
)

// ErrUnroutable is wrapped by the error of a mandatory message the broker
// returned because no queue is bound to take it.
var ErrUnroutable = errors.New("rabbitmq: message unroutable (no queue bound for its routing key)")

// ErrNacked is wrapped by the error of a message the broker refused with
// basic.nack (such as a full queue with overflow reject-publish).
var ErrNacked = errors.New("rabbitmq: broker nacked the message")

// errQueueFull is wrapped by the error of a nacked message that fits the
// queues it routes to (see nacked): they had no room for it.
var errQueueFull = errors.New("a queue it routes to is full (x-overflow reject-publish)")

// classify marks a failed publish with its fault class, blame, reason and
// code, as the package documentation's table says. ctx is the caller's
// context: when it is done, the error also wraps ctx.Err().
func classify(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		err = fmt.Errorf("%w: %w", err, cerr)
	}
	var amqpErr *amqp.Error
	switch {
	case errors.Is(err, ErrUnroutable):
		return transport.DestinationFault(err, errorhandling.ReasonTransportUnavailable, "unroutable")
	case errors.Is(err, errQueueFull):
		return transport.NoRoom(err, errorhandling.ReasonTransportUnavailable, "queue_full")
	case errors.Is(err, ErrNacked):
		return transport.DestinationFault(err, errorhandling.ReasonTransportUnavailable, "nack")
	case errors.Is(err, errBlocked):
		return transport.DestinationFault(err, errorhandling.ReasonTransportUnavailable, "blocked")
	case errors.Is(err, ErrClosed):
		return transport.DestinationFault(err, errorhandling.ReasonTransportUnavailable, "closed")
	case errors.Is(err, context.DeadlineExceeded):
		return transport.DestinationFault(err, errorhandling.ReasonTimeoutExceeded, "timeout")
	case errors.Is(err, context.Canceled):
		return transport.DestinationFault(err, errorhandling.ReasonTransportUnavailable, "canceled")
	case errors.As(err, &amqpErr):
		return classifyAMQPError(err, amqpErr)
	}
	// A refused or broken connection and anything else: when either party
	// could be at fault, the destination is blamed.
	return transport.DestinationFault(err, errorhandling.ReasonTransportUnavailable, "")
}

// classifyAMQPError sorts the exceptions a broker closes a channel or
// connection with.
func classifyAMQPError(err error, e *amqp.Error) error {
	switch e.Code {
	case amqp.NotFound:
		return transport.DestinationFault(err, errorhandling.ReasonTransportUnavailable, "not_found")
	case amqp.AccessRefused:
		return transport.DestinationFault(err, errorhandling.ReasonTransportUnavailable, "access_refused")
	case amqp.PreconditionFailed, amqp.ContentTooLarge:
		// At publish, the broker refuses the message itself: larger than
		// max_message_size, or a property it cannot accept.
		return transport.MessageFault(err, errorhandling.ReasonValidationFailure, "rejected")
	case amqp.ChannelError:
		if e == amqp.ErrClosed {
			return transport.DestinationFault(err, errorhandling.ReasonTransportUnavailable, "connection_closed")
		}
	}
	return transport.DestinationFault(err, errorhandling.ReasonTransportUnavailable, fmt.Sprintf("amqp_%d", e.Code))
}
