package transport

import "github.com/backstophq/backstop/errorhandling"

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
