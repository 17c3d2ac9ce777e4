package errorhandling

import "fmt"

// FailureReason names why a message failed. The numeric values are those of
// the work-coordination design (seed 000) and are stored in the outbox's
// failure_reason column, so they never change.
type FailureReason int

// The failure reasons.
const (
	// ReasonTransportUnavailable: network or transport issues.
	ReasonTransportUnavailable FailureReason = 1
	// ReasonHandlerException: the handler returned or raised an error.
	ReasonHandlerException FailureReason = 2
	// ReasonValidationFailure: the message failed validation.
	ReasonValidationFailure FailureReason = 3
	// ReasonTimeoutExceeded: processing took too long.
	ReasonTimeoutExceeded FailureReason = 4
	// ReasonSerializationError: the message cannot be (de)serialised.
	ReasonSerializationError FailureReason = 5
	// ReasonDependencyFailure: an external dependency is unavailable.
	ReasonDependencyFailure FailureReason = 6
	// ReasonPoisonMessage: the message exceeded its retry limit.
	ReasonPoisonMessage FailureReason = 7
	// ReasonUnknown: not classified. It is the default.
	ReasonUnknown FailureReason = 99
)

// Reasons lists every failure reason in numeric order.
var Reasons = []FailureReason{
	ReasonTransportUnavailable, ReasonHandlerException, ReasonValidationFailure,
	ReasonTimeoutExceeded, ReasonSerializationError, ReasonDependencyFailure,
	ReasonPoisonMessage, ReasonUnknown,
}

// String returns the reason's name as the design spells it, such as
// "TransportUnavailable".
func (r FailureReason) String() string {
	switch r {
	case ReasonTransportUnavailable:
		return "TransportUnavailable"
	case ReasonHandlerException:
		return "HandlerException"
	case ReasonValidationFailure:
		return "ValidationFailure"
	case ReasonTimeoutExceeded:
		return "TimeoutExceeded"
	case ReasonSerializationError:
		return "SerializationError"
	case ReasonDependencyFailure:
		return "DependencyFailure"
	case ReasonPoisonMessage:
		return "PoisonMessage"
	case ReasonUnknown:
		return "Unknown"
	}
	return fmt.Sprintf("FailureReason(%d)", int(r))
}

// ParseFailureReason returns the reason named s (as String spells it, case
// sensitive) or with the decimal value s.
func ParseFailureReason(s string) (FailureReason, error) {
	for _, r := range Reasons {
		if r.String() == s || fmt.Sprint(int(r)) == s {
			return r, nil
		}
	}
	return 0, fmt.Errorf("errorhandling: unknown failure reason %q", s)
}

// DefaultClass returns the fault class and blame a reason carries when
// nothing more specific is known:
//
//	reason                class      blame
//	TransportUnavailable  transient  destination
//	HandlerException      unknown    message
//	ValidationFailure     permanent  message
//	TimeoutExceeded       transient  destination
//	SerializationError    permanent  message
//	DependencyFailure     transient  destination
//	PoisonMessage         permanent  message
//	Unknown               unknown    message
func (r FailureReason) DefaultClass() (Class, Blame) {
	switch r {
	case ReasonTransportUnavailable, ReasonTimeoutExceeded, ReasonDependencyFailure:
		return ClassTransient, BlameDestination
	case ReasonValidationFailure, ReasonSerializationError, ReasonPoisonMessage:
		return ClassPermanent, BlameMessage
	}
	return ClassUnknown, BlameMessage
}
