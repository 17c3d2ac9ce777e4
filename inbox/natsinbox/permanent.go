package natsinbox

import (
	"errors"
	"net/url"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop/internal/tlsfault"
)

// permanentError marks a refusal of the consumer's settings that no retry
// cures (IsPermanent).
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

func permanent(err error) error { return &permanentError{err} }

// IsPermanent reports whether err, met connecting to a NATS server,
// creating or reading a consumer, is a mistake of the configuration that
// trying again does not cure, so that a program starting with it should
// stop and say so:
//
//   - the receiver refuses the consumer's settings (AckPolicy, HeadersOnly,
//     an AckWait not under the inbox's DedupWindow, MaxRequestExpires);
//   - the client refuses a name or subject before asking (an invalid
//     stream or consumer name) or the URL;
//   - the server answered and refused what was asked: a JetStream API
//     error of the 4xx kind (the stream or the consumer not found, an
//     invalid name, a setting it refuses), credentials refused, expired or
//     revoked, a permission refused;
//   - a TLS handshake that cannot succeed as configured: a certificate
//     that does not verify, an alert from the server (such as refusing
//     the client's certificate).
//
// Everything else is transient, to be tried again: the server cannot be
// reached, did not answer in time (a timeout, no responders while
// JetStream starts), the connection closed or is reconnecting, or
// JetStream answered that it is not available now (a 5xx API error,
// JetStream not enabled yet).
func IsPermanent(err error) bool {
	if err == nil {
		return false
	}
	var pe *permanentError
	var ue *url.Error
	if errors.As(err, &pe) || errors.As(err, &ue) || tlsfault.Refused(err) {
		return true
	}
	for _, e := range []error{
		jetstream.ErrInvalidStreamName, jetstream.ErrInvalidConsumerName, jetstream.ErrStreamNameRequired,
		jetstream.ErrInvalidSubject, jetstream.ErrNotPullConsumer, jetstream.ErrConsumerMultipleFilterSubjectsNotSupported,
		nats.ErrAuthorization, nats.ErrAuthExpired, nats.ErrAuthRevoked, nats.ErrPermissionViolation, nats.ErrBadSubject,
	} {
		if errors.Is(err, e) {
			return true
		}
	}
	var je jetstream.JetStreamError
	if errors.As(err, &je) {
		if api := je.APIError(); api != nil {
			return api.Code >= 400 && api.Code < 500
		}
	}
	var api *jetstream.APIError
	if errors.As(err, &api) {
		return api.Code >= 400 && api.Code < 500
	}
	return false
}
