package retry

import (
	"errors"
	"fmt"
	"strings"
)

// StopReason says why an Executor stopped without success.
type StopReason int

// The reasons an Executor stops without success. The zero value is none of
// them.
const (
	// Exhausted: the tries ran out (Config.MaxAttempts), or the Strategy
	// returned Stop.
	Exhausted StopReason = iota + 1
	// Permanent: the classifier called the error permanent (a marker, a
	// user rule or a built-in rule).
	Permanent
	// NotRetryable: Config.RetryOnErrorCodes is set and the error's code
	// is not in it.
	NotRetryable
	// Cancelled: the context was done before a try or during a wait.
	Cancelled
)

// String returns the reason in words, such as "exhausted".
func (r StopReason) String() string {
	switch r {
	case Exhausted:
		return "exhausted"
	case Permanent:
		return "permanent"
	case NotRetryable:
		return "not retryable"
	case Cancelled:
		return "cancelled"
	}
	return fmt.Sprintf("StopReason(%d)", int(r))
}

// Sentinels that errors.Is matches against an *Error with the same Reason.
var (
	// ErrExhausted matches an *Error whose Reason is Exhausted.
	ErrExhausted = errors.New("retry: attempts exhausted")
	// ErrPermanent matches an *Error whose Reason is Permanent.
	ErrPermanent = errors.New("retry: permanent error")
	// ErrNotRetryable matches an *Error whose Reason is NotRetryable.
	ErrNotRetryable = errors.New("retry: error not retryable")
	// ErrCancelled matches an *Error whose Reason is Cancelled.
	ErrCancelled = errors.New("retry: cancelled")
)

// Error is what an Executor returns when it stops without success. It
// unwraps to the last error the operation returned and, when Cancelled, to
// the context's error, so errors.Is and errors.As reach both, and it
// matches the sentinel of its Reason (errors.Is(err, ErrExhausted)).
type Error struct {
	// Reason says why the executor stopped.
	Reason StopReason
	// Attempts is how many times the operation was called, remedied
	// tries included; 0 when the context was done before the first.
	Attempts int
	// Last is the error of the last try; nil when there was none.
	Last error

	ctxErr error // the context's error, when Cancelled
}

// Error says why the executor stopped and includes the last error.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("retry: ")
	switch e.Reason {
	case Exhausted:
		fmt.Fprintf(&b, "gave up after %s", tries(e.Attempts))
	case Permanent:
		fmt.Fprintf(&b, "permanent error on attempt %d", e.Attempts)
	case NotRetryable:
		fmt.Fprintf(&b, "error not retryable on attempt %d", e.Attempts)
	case Cancelled:
		if e.Attempts == 0 {
			b.WriteString("cancelled before the first attempt")
		} else {
			fmt.Fprintf(&b, "cancelled after %s", tries(e.Attempts))
		}
		if e.ctxErr != nil {
			b.WriteString(": ")
			b.WriteString(e.ctxErr.Error())
		}
		if e.Last != nil {
			b.WriteString("; last error: ")
			b.WriteString(e.Last.Error())
		}
		return b.String()
	default:
		fmt.Fprintf(&b, "stopped (%v) after %s", e.Reason, tries(e.Attempts))
	}
	if e.Last != nil {
		b.WriteString(": ")
		b.WriteString(e.Last.Error())
	}
	return b.String()
}

func tries(n int) string {
	if n == 1 {
		return "1 attempt"
	}
	return fmt.Sprintf("%d attempts", n)
}

// Unwrap returns the last error and, when Cancelled, the context's error.
func (e *Error) Unwrap() []error {
	switch {
	case e.Last != nil && e.ctxErr != nil:
		return []error{e.Last, e.ctxErr}
	case e.Last != nil:
		return []error{e.Last}
	case e.ctxErr != nil:
		return []error{e.ctxErr}
	}
	return nil
}

// Is reports whether target is the sentinel of e's Reason.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrExhausted:
		return e.Reason == Exhausted
	case ErrPermanent:
		return e.Reason == Permanent
	case ErrNotRetryable:
		return e.Reason == NotRetryable
	case ErrCancelled:
		return e.Reason == Cancelled
	}
	return false
}
