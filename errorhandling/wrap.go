package errorhandling

import (
	"context"
	"errors"
	"time"
)

// Each wrapper below returns nil for a nil error, keeps the wrapped error's
// message unchanged, and implements Unwrap so that errors.Is and errors.As
// see through it. When wrappers that set the same property are nested, the
// outermost one wins.

// Permanent marks err as a permanent fault: it is never retried.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// Transient marks err as a transient fault: it is retried with back-off.
func Transient(err error) error {
	if err == nil {
		return nil
	}
	return &TransientError{Err: err}
}

// Recognised marks err as a recognised fault that remedy fixes. The retry
// executor runs the remedy before its next try; a remedy that has not
// worked after a bounded number of tries is promoted to a transient fault.
// A nil remedy means the next try itself is the remedy.
func Recognised(err error, remedy Remedy) error {
	if err == nil {
		return nil
	}
	return &RecognisedError{Err: err, Remedy: remedy}
}

// Remedy fixes a recognised fault, such as by re-reading what the recipient
// already has. It returns an error when it could not.
type Remedy func(ctx context.Context) error

// WithReason attaches a failure reason to err.
func WithReason(err error, reason FailureReason) error {
	if err == nil {
		return nil
	}
	return &ReasonError{Err: err, Reason: reason}
}

// WithCode attaches an error code, such as "rate_limit", to err. Codes are
// what ErrorClassifier.IsRetryable and retry's WithRetryOnErrorCodes test.
func WithCode(err error, code string) error {
	if err == nil {
		return nil
	}
	return &CodeError{Err: err, Code: code}
}

// WithBlame says whom err is to be charged to.
func WithBlame(err error, blame Blame) error {
	if err == nil {
		return nil
	}
	return &BlameError{Err: err, Blame: blame}
}

// WithHTTPStatus attaches the HTTP status code of a failed request to err.
// The classifier reads it: 3xx, 401, 403, 404, 405, 407, 408, 410, 421,
// 423, 425, 426, 429 and 5xx are transient faults of the destination; 400, 413,
// 415, 422 and the other 4xx are permanent faults of the message (see
// Classify).
func WithHTTPStatus(err error, status int) error {
	if err == nil {
		return nil
	}
	return &HTTPStatusError{Err: err, Status: status}
}

// RetryAfter attaches a hint that the operation must not be retried sooner
// than d (an HTTP 429's Retry-After). The retry executor waits at least d.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &RetryAfterError{Err: err, After: d}
}

// PermanentError is the error Permanent returns.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string     { return e.Err.Error() }
func (e *PermanentError) Unwrap() error     { return e.Err }
func (e *PermanentError) faultClass() Class { return ClassPermanent }

// TransientError is the error Transient returns.
type TransientError struct{ Err error }

func (e *TransientError) Error() string     { return e.Err.Error() }
func (e *TransientError) Unwrap() error     { return e.Err }
func (e *TransientError) faultClass() Class { return ClassTransient }

// RecognisedError is the error Recognised returns.
type RecognisedError struct {
	Err    error
	Remedy Remedy
}

func (e *RecognisedError) Error() string     { return e.Err.Error() }
func (e *RecognisedError) Unwrap() error     { return e.Err }
func (e *RecognisedError) faultClass() Class { return ClassRecognised }

// ReasonError is the error WithReason returns.
type ReasonError struct {
	Err    error
	Reason FailureReason
}

func (e *ReasonError) Error() string { return e.Err.Error() }
func (e *ReasonError) Unwrap() error { return e.Err }

// CodeError is the error WithCode returns.
type CodeError struct {
	Err  error
	Code string
}

func (e *CodeError) Error() string { return e.Err.Error() }
func (e *CodeError) Unwrap() error { return e.Err }

// BlameError is the error WithBlame returns.
type BlameError struct {
	Err   error
	Blame Blame
}

func (e *BlameError) Error() string { return e.Err.Error() }
func (e *BlameError) Unwrap() error { return e.Err }

// HTTPStatusError is the error WithHTTPStatus returns.
type HTTPStatusError struct {
	Err    error
	Status int
}

func (e *HTTPStatusError) Error() string { return e.Err.Error() }
func (e *HTTPStatusError) Unwrap() error { return e.Err }

// HTTPStatusCode returns the attached status; HTTPStatusOf reads it.
func (e *HTTPStatusError) HTTPStatusCode() int { return e.Status }

// RetryAfterError is the error RetryAfter returns.
type RetryAfterError struct {
	Err   error
	After time.Duration
}

func (e *RetryAfterError) Error() string { return e.Err.Error() }
func (e *RetryAfterError) Unwrap() error { return e.Err }

// classMarker is implemented by the wrappers that set a fault class.
type classMarker interface{ faultClass() Class }

// MarkedClass returns the class set on err by the outermost of Permanent,
// Transient or Recognised, and false when none was.
func MarkedClass(err error) (Class, bool) {
	var m classMarker
	if errors.As(err, &m) {
		return m.faultClass(), true
	}
	return ClassUnknown, false
}

// IsPermanent reports whether err was marked with Permanent (outermost
// class marker wins).
func IsPermanent(err error) bool {
	c, ok := MarkedClass(err)
	return ok && c == ClassPermanent
}

// ReasonOf returns the failure reason attached to err by WithReason, and
// false when none was.
func ReasonOf(err error) (FailureReason, bool) {
	var r *ReasonError
	if errors.As(err, &r) {
		return r.Reason, true
	}
	return ReasonUnknown, false
}

// CodeOf returns the code attached to err by WithCode, and false when none
// was. ErrorClassifier.Classify also derives codes from well-known errors.
func CodeOf(err error) (string, bool) {
	var c *CodeError
	if errors.As(err, &c) {
		return c.Code, true
	}
	return "", false
}

// BlameOf returns the blame attached to err by WithBlame, and false when
// none was.
func BlameOf(err error) (Blame, bool) {
	var b *BlameError
	if errors.As(err, &b) {
		return b.Blame, true
	}
	return BlameDestination, false
}

// RetryAfterOf returns the retry-after hint attached to err, and false when
// none was.
func RetryAfterOf(err error) (time.Duration, bool) {
	var r *RetryAfterError
	if errors.As(err, &r) {
		return r.After, true
	}
	return 0, false
}

// HTTPStatusOf returns the HTTP status code carried by err: one attached by
// WithHTTPStatus or reported by any error in the chain with an
// HTTPStatusCode() int method.
func HTTPStatusOf(err error) (int, bool) {
	var s interface{ HTTPStatusCode() int }
	if errors.As(err, &s) {
		return s.HTTPStatusCode(), true
	}
	return 0, false
}

// SQLStateOf returns the SQLSTATE code carried by err: any error in the
// chain with an SQLState() string method, as pgx's *pgconn.PgError has.
func SQLStateOf(err error) (string, bool) {
	var s interface{ SQLState() string }
	if errors.As(err, &s) {
		if code := s.SQLState(); code != "" {
			return code, true
		}
	}
	return "", false
}
