package store

import (
	"math"
	"time"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/retry"
)

// FailureOutcome is what a Failure does to its message. Every store
// computes it with Config.DecideFailure, from the attempts it read inside
// its transaction, so that all stores schedule and dead-letter alike.
type FailureOutcome struct {
	// Attempts is the message's attempt count after this failure. It
	// stops at math.MaxInt32, the most a store keeps (a 32-bit column),
	// so that a count written that high by plain SQL cannot make the
	// store refuse the failure.
	Attempts int
	// Reason is the reason recorded on the message: the failure's, or
	// ReasonUnknown when the failure carries none.
	Reason errorhandling.FailureReason
	// DeadLetter says the message moves to the dead-letter queue now.
	DeadLetter bool
	// DeadLetterReason is the dead-letter entry's reason: the failure's
	// reason when it is permanent, ReasonPoisonMessage when the attempts or
	// the strategy ran out.
	DeadLetterReason errorhandling.FailureReason
	// Delay is how long after now the message is due again; zero when it
	// is dead-lettered.
	Delay time.Duration
}

// DecideFailure applies the destination's policy to a failure of a message
// that had attemptsBefore failed attempts:
//
//   - Permanent dead-letters at once with the failure's reason;
//   - attempts reaching MaxAttempts, or the strategy answering retry.Stop
//     (or any negative delay), dead-letter with ReasonPoisonMessage;
//   - otherwise the message waits max(Strategy.Delay(attempts), RetryAfter).
//
// c must have had WithDefaults applied.
func (c Config) DecideFailure(destination string, attemptsBefore int, f Failure) FailureOutcome {
	p := c.PolicyFor(destination)
	out := FailureOutcome{Attempts: min(attemptsBefore, math.MaxInt32-1) + 1, Reason: f.Reason}
	if out.Reason == 0 {
		out.Reason = errorhandling.ReasonUnknown
	}
	switch {
	case f.Permanent:
		out.DeadLetter, out.DeadLetterReason = true, out.Reason
		return out
	case out.Attempts >= p.MaxAttempts:
		out.DeadLetter, out.DeadLetterReason = true, errorhandling.ReasonPoisonMessage
		return out
	}
	d := p.Strategy.Delay(out.Attempts)
	if d == retry.Stop || d < 0 {
		out.DeadLetter, out.DeadLetterReason = true, errorhandling.ReasonPoisonMessage
		return out
	}
	out.Delay = max(d, f.RetryAfter)
	return out
}
