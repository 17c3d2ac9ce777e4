package errorhandling

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
)

// classifyBuiltin applies the built-in rules, in the order Classify
// documents.
func (c *ErrorClassifier) classifyBuiltin(err error) (Classification, bool) {
	code, explicit := CodeOf(err)
	if !explicit {
		// A code derived from a well-known error (such as "http_418") is
		// retryable when the user made it so with AddRetryableError.
		code = deriveCode(err)
	}
	if code != "" && c.IsRetryable(code) && (explicit || c.userRetryable(code)) {
		v := Classification{Class: ClassTransient, Blame: BlameDestination, Rule: "code"}
		if code == "timeout" {
			v.Reason = ReasonTimeoutExceeded
		}
		return v, true
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return Classification{Class: ClassTransient, Blame: BlameDestination, Reason: ReasonTimeoutExceeded, Rule: "context"}, true
	case errors.Is(err, context.Canceled):
		// The caller gave up (shutdown); nothing is wrong with either party,
		// and the work must be tried again later.
		return Classification{Class: ClassTransient, Blame: BlameDestination, Rule: "context"}, true
	}
	if status, ok := HTTPStatusOf(err); ok {
		if _, later := RetryAfterOf(err); later && status == 413 {
			// A body too large for now (RFC 9110, 15.5.14): the message
			// waits out the Retry-After, charged, and its destination goes
			// on with the others.
			return Classification{Class: ClassTransient, Blame: BlameMessage, Reason: ReasonValidationFailure, Rule: "http_status"}, true
		}
		// A 1xx or 2xx says nothing; the later rules decide.
		if v, ok := classifyHTTPStatus(status); ok {
			return v, true
		}
	}
	if state, ok := SQLStateOf(err); ok {
		if v, ok := classifySQLState(state); ok {
			return v, true
		}
	}
	if v, ok := classifyNetwork(err); ok {
		return v, true
	}
	var syntaxErr *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &syntaxErr) || errors.As(err, &typeErr) {
		return Classification{Class: ClassPermanent, Blame: BlameMessage, Reason: ReasonSerializationError, Rule: "json"}, true
	}
	if r, ok := ReasonOf(err); ok && r != ReasonUnknown {
		class, blame := r.DefaultClass()
		if class != ClassUnknown {
			return Classification{Class: class, Blame: blame, Reason: r, Rule: "reason"}, true
		}
	}
	return Classification{}, false
}

// classifyHTTPStatus applies the HTTP status table of Classify. The
// refusals of every message alike (refusalCode) get reason
// DependencyFailure: the destination answered but cannot be used as
// configured, which is apart from TransportUnavailable (it could not be
// reached, or was overloaded).
func classifyHTTPStatus(status int) (Classification, bool) {
	v := Classification{Class: ClassTransient, Blame: BlameDestination, Reason: ReasonTransportUnavailable, Rule: "http_status"}
	switch {
	case refusalCode(status) != "":
		v.Reason = ReasonDependencyFailure
	case status == 408 || status == 504:
		v.Reason = ReasonTimeoutExceeded
	case status == 423 || status == 425 || status == 429 || (status >= 500 && status <= 599) || (status >= 300 && status <= 399):
	case status >= 400 && status <= 499:
		v = Classification{Class: ClassPermanent, Blame: BlameMessage, Reason: ReasonValidationFailure, Rule: "http_status"}
	default:
		return Classification{}, false
	}
	return v, true
}

// refusalCode names the statuses by which a destination refuses every
// message alike (a credential or a route is wrong), and returns "" for
// others.
func refusalCode(status int) string {
	switch status {
	case 401:
		return "unauthorized"
	case 403:
		return "forbidden"
	case 404:
		return "not_found"
	case 405:
		return "method_not_allowed"
	case 407:
		return "proxy_auth_required"
	case 410:
		return "gone"
	case 421:
		return "misdirected_request"
	case 426:
		return "upgrade_required"
	}
	return ""
}

// classifySQLState sorts PostgreSQL error codes. Transient, blamed on the
// database: serialization failures and deadlocks (class 40), connection
// exceptions (08), insufficient resources (53), operator intervention (57),
// system errors (58). Permanent, blamed on the message: data exceptions (22),
// integrity constraint violations (23), syntax errors and access rule
// violations (42).
func classifySQLState(state string) (Classification, bool) {
	if len(state) != 5 {
		return Classification{}, false
	}
	switch state[:2] {
	case "40", "08", "53", "57", "58":
		return Classification{Class: ClassTransient, Blame: BlameDestination, Reason: ReasonDependencyFailure, Rule: "sqlstate"}, true
	case "22":
		return Classification{Class: ClassPermanent, Blame: BlameMessage, Reason: ReasonSerializationError, Rule: "sqlstate"}, true
	case "23", "42":
		return Classification{Class: ClassPermanent, Blame: BlameMessage, Reason: ReasonValidationFailure, Rule: "sqlstate"}, true
	}
	return Classification{}, false
}

// classifyNetwork recognises timeouts, refused and reset connections, and
// the other errors of talking to a peer over a network. All are transient
// faults of the destination.
func classifyNetwork(err error) (Classification, bool) {
	transient := Classification{Class: ClassTransient, Blame: BlameDestination, Reason: ReasonTransportUnavailable, Rule: "network"}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		transient.Reason = ReasonTimeoutExceeded
		return transient, true
	}
	for _, errno := range []syscall.Errno{
		syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE,
		syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.ENETDOWN, syscall.ETIMEDOUT,
	} {
		if errors.Is(err, errno) {
			return transient, true
		}
	}
	var opErr *net.OpError
	var dnsErr *net.DNSError
	if errors.As(err, &opErr) || errors.As(err, &dnsErr) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
		return transient, true
	}
	return Classification{}, false
}

// deriveCode names well-known errors with the codes of
// BuiltinRetryableCodes, the refusal codes of classifyHTTPStatus, and
// "http_NNN" and "sqlstate_XXXXX".
func deriveCode(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, syscall.ETIMEDOUT),
		errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection_refused"
	}
	if status, ok := HTTPStatusOf(err); ok {
		switch status {
		case 429:
			return "rate_limit"
		case 503:
			return "service_unavailable"
		case 408, 504:
			return "timeout"
		}
		if code := refusalCode(status); code != "" {
			return code
		}
		return fmt.Sprintf("http_%d", status)
	}
	if state, ok := SQLStateOf(err); ok {
		return "sqlstate_" + strings.ToUpper(state)
	}
	if v, ok := classifyNetwork(err); ok && v.Class == ClassTransient {
		return "network"
	}
	return ""
}

// findRecognised returns the outermost RecognisedError in err's chain.
func findRecognised(err error) (*RecognisedError, bool) {
	var r *RecognisedError
	ok := errors.As(err, &r)
	return r, ok
}
