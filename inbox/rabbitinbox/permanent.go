package rabbitinbox

import (
	"errors"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/backstophq/backstop/internal/tlsfault"
)

// permanentError marks an error no retry cures (IsPermanent).
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// IsPermanent reports whether err, met dialing the broker or starting a
// consumer, is a mistake of the configuration that trying again does not
// cure, so that a program starting with it should stop and say so: a URL
// that does not parse, credentials refused (RabbitMQ closes the socket
// after a refused login, which the client reports as
// amqp.ErrCredentials; the receiver logs in a second time before it
// believes it, since a login cut short reads the same), a virtual host
// refused, no SASL mechanism in common, a TLS handshake that cannot
// succeed as configured (a certificate that does not verify, a port that
// does not speak TLS), or the broker refusing the consumer: the queue not
// found (404), access refused (403), a precondition failed (406), not
// allowed (530, but for a connection limit reached).
//
// Everything else is transient, to be tried again: the broker cannot be
// reached or closed the connection (a restart, a network failure, a
// connection limit), did not answer in time, or the queue is locked by
// another's exclusive consumer (405).
func IsPermanent(err error) bool {
	var pe *permanentError
	if errors.As(err, &pe) {
		return true
	}
	if errors.Is(err, amqp.ErrCredentials) || errors.Is(err, amqp.ErrVhost) || errors.Is(err, amqp.ErrSASL) ||
		tlsfault.Refused(err) {
		return true
	}
	var e *amqp.Error
	if errors.As(err, &e) {
		switch e.Code {
		case amqp.AccessRefused, amqp.NotFound, amqp.PreconditionFailed:
			return true
		case amqp.NotAllowed:
			// Also a connection limit reached, which lifts.
			return !strings.Contains(e.Reason, "limit")
		}
	}
	return false
}
