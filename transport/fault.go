package transport

import (
	"errors"
	"time"

	"github.com/backstophq/backstop/errorhandling"
)

// ErrNotSent is matched by the error of a delivery that sent nothing:
// the transport refused the message before it reached the destination
// (Unsendable). Nothing was learnt about the destination, so the relay's
// breaker does not count it, and a probe of an open circuit that ends so
// neither closes the circuit nor keeps it open: another message probes.
var ErrNotSent = errors.New("transport: nothing was sent")

// DestinationFault marks err as a transient fault of the destination (an
// outage, a refusal to take anything right now, a misconfiguration an
// operator must fix) with its failure reason and, when code is not empty,
// a short code such as "timeout". The relay releases such a message
// without charging an attempt and counts the fault against the
// destination's breaker.
func DestinationFault(err error, reason errorhandling.FailureReason, code string) error {
	if err == nil {
		return nil
	}
	if code != "" {
		err = errorhandling.WithCode(err, code)
	}
	return errorhandling.Transient(errorhandling.WithBlame(errorhandling.WithReason(err, reason), errorhandling.BlameDestination))
}

// MessageFault marks err as a permanent fault of the message (its content
// can never be delivered) with its failure reason and optional code. The
// relay dead-letters such a message at once.
func MessageFault(err error, reason errorhandling.FailureReason, code string) error {
	if err == nil {
		return nil
	}
	if code != "" {
		err = errorhandling.WithCode(err, code)
	}
	return errorhandling.Permanent(errorhandling.WithBlame(errorhandling.WithReason(err, reason), errorhandling.BlameMessage))
}

// Unsendable is MessageFault for a message the transport refused before
// sending anything (a header HTTP cannot carry, a subject NATS refuses):
// its error also matches ErrNotSent. Its text is err's.
func Unsendable(err error, reason errorhandling.FailureReason, code string) error {
	if err == nil {
		return nil
	}
	return MessageFault(notSent{err}, reason, code)
}

// notSent is an error that matches ErrNotSent besides its own chain.
type notSent struct{ err error }

func (e notSent) Error() string   { return e.err.Error() }
func (e notSent) Unwrap() []error { return []error{e.err, ErrNotSent} }

// ErrNoRoom is matched by the error of a destination that refused a
// message for lack of room (a queue full with RabbitMQ's x-overflow
// reject-publish), which it would take once it has room again: the
// refusal says nothing about the message. The relay never singles such a
// message out (Destination.SingledOutAfter), however long the destination
// goes on taking a message now and then and refusing the others.
var ErrNoRoom = errors.New("transport: the destination has no room")

// NoRoom is DestinationFault for a destination that refused the message
// for lack of room: its error also matches ErrNoRoom. Its text is err's.
func NoRoom(err error, reason errorhandling.FailureReason, code string) error {
	if err == nil {
		return nil
	}
	return DestinationFault(noRoom{err}, reason, code)
}

// noRoom is an error that matches ErrNoRoom besides its own chain.
type noRoom struct{ err error }

func (e noRoom) Error() string   { return e.err.Error() }
func (e noRoom) Unwrap() []error { return []error{e.err, ErrNoRoom} }

// ErrElsewhere is matched by the error of a delivery that this process
// cannot make and another may (Elsewhere): nothing was sent, and nothing
// is wrong with the message or the destination.
var ErrElsewhere = errors.New("transport: left to another process")

// Elsewhere marks err as a delivery this process cannot make but another
// process of the fleet may: an inbox of an older version, during a rolling
// deploy, has no handler for a type only the newer version knows. The
// relay gives the message back without charging an attempt and without
// telling the destination's breaker or tracker, due again after after
// (at least a millisecond, at most an hour), so that an instance that can
// deliver it claims it. The error also matches ErrElsewhere and
// ErrNotSent; its text is err's. The caller bounds how long a message may
// be left so: Elsewhere alone would keep it for ever.
func Elsewhere(err error, after time.Duration) error {
	if err == nil {
		return nil
	}
	return errorhandling.Permanent(elsewhere{err: err, after: after})
}

// ElsewhereAfter reports whether err was marked with Elsewhere, and the
// delay it asked for.
func ElsewhereAfter(err error) (after time.Duration, ok bool) {
	var e elsewhere
	if !errors.As(err, &e) {
		return 0, false
	}
	return e.after, true
}

// elsewhere is an error that matches ErrElsewhere and ErrNotSent besides
// its own chain.
type elsewhere struct {
	err   error
	after time.Duration
}

func (e elsewhere) Error() string   { return e.err.Error() }
func (e elsewhere) Unwrap() []error { return []error{e.err, ErrElsewhere, ErrNotSent} }
