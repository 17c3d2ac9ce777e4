// Package errorhandling decides what a failure means: whether to retry it,
// whom to blame for it, and how to name it.
//
// Backstop sorts every failure into one of the fault classes of its design:
//
//   - Recognised: the software knows a remedy and applies it by itself
//     (re-sync an offset, refresh a token). Logged to diagnostics only. A
//     remedy that has not worked after a bounded number of tries stops being
//     recognised and is promoted to Transient, so it can never loop forever.
//   - Transient: probably environmental; retried with back-off.
//   - Permanent: will not go away on its own; never retried.
//   - Unknown: nobody classified it. Treated as Permanent by default, so it
//     reaches the operations log and someone classifies it; one classifier
//     setting (UnknownIsTransient) treats it as Transient instead.
//
// Each classification also says whom to blame (BlameDestination for
// outage-like faults of the service being called, BlameMessage for faults of
// the message's own content), which failure reason it carries, and a short
// code such as "timeout" or "rate_limit".
//
// The wrappers Permanent, Transient, Recognised, WithReason, WithCode,
// WithHTTPStatus, WithBlame and RetryAfter change how an error is treated
// without changing its message, and are found by errors.Is and errors.As
// through any amount of %w wrapping.
//
// Fingerprint gives "the same error" one short stable key (its root cause's
// type and its message with ids, addresses and numbers normalised away), so
// that dead letters and logs can be grouped. PropagationConfig says what a
// task's failure does to the rest of a workflow (DAG) run.
package errorhandling

import "fmt"

// Class is a fault class.
type Class int

// The fault classes. The zero value is ClassUnknown.
const (
	// ClassUnknown is an error nobody has classified.
	ClassUnknown Class = iota
	// ClassRecognised is a fault the software remedies by itself.
	ClassRecognised
	// ClassTransient is a fault expected to go away; it is retried.
	ClassTransient
	// ClassPermanent is a fault that will not go away; it is never retried.
	ClassPermanent
)

// String returns the class's lower-case name.
func (c Class) String() string {
	switch c {
	case ClassUnknown:
		return "unknown"
	case ClassRecognised:
		return "recognised"
	case ClassTransient:
		return "transient"
	case ClassPermanent:
		return "permanent"
	}
	return fmt.Sprintf("class(%d)", int(c))
}

// Blame says who a failure is charged to.
//
// Seed 004 calls the two parties the service and the parameter; in a relay
// they are the destination and the message. A fault charged to the
// destination feeds that destination's tracker and circuit breaker and does
// not use up the message's attempts; a fault charged to the message counts
// against the message only. When both are plausible the destination is
// blamed.
type Blame int

// The parties a fault can be charged to.
const (
	// BlameDestination charges the service being called: outages,
	// timeouts, refused connections, 5xx, 429, and refusals of every
	// message alike such as a revoked credential or a wrong route (401,
	// 403, 404, 405, 407, 410, 421, 426), and 423 and 425.
	BlameDestination Blame = iota
	// BlameMessage charges the message or parameter: validation,
	// serialization, 400, 413, 415, 422 and the other 4xx, constraint
	// violations.
	BlameMessage
)

// String returns "destination" or "message".
func (b Blame) String() string {
	switch b {
	case BlameDestination:
		return "destination"
	case BlameMessage:
		return "message"
	}
	return fmt.Sprintf("blame(%d)", int(b))
}
