package webhook

import (
	"bytes"
	"crypto/hmac"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/backstophq/backstop/outbox"
)

// DefaultTolerance is how far a request's timestamp may be from the
// receiver's clock when Verify is given a zero tolerance: five minutes,
// as the Standard Webhooks libraries use.
const DefaultTolerance = 5 * time.Minute

// MaxVerifyBody is the largest body VerifyRequest and RequireSignature
// read: outbox.DefaultMaxPayloadBytes (1 MiB), the largest payload the
// transport sends unless its Config.Limits raise the limit. A receiver of
// larger messages reads the body itself and calls Verify.
const MaxVerifyBody = outbox.DefaultMaxPayloadBytes

// Errors of Verify and VerifyRequest. Every failure of the request's own
// signature matches ErrInvalidSignature and the more precise error named
// here; a secret the receiver cannot use matches ErrBadSecret instead.
var (
	// ErrInvalidSignature is matched by every verification failure.
	ErrInvalidSignature = errors.New("webhook: invalid signature")
	// ErrMissingHeaders: webhook-id, webhook-timestamp or
	// webhook-signature is missing.
	ErrMissingHeaders = errors.New("missing webhook-id, webhook-timestamp or webhook-signature")
	// ErrNoSignature: webhook-signature holds no v1 signature.
	ErrNoSignature = errors.New("no v1 signature")
	// ErrSignatureMismatch: no signature of the request matches the key.
	ErrSignatureMismatch = errors.New("signature does not match")
	// ErrBadTimestamp: the timestamp is not Unix seconds.
	ErrBadTimestamp = errors.New("timestamp is not Unix seconds")
	// ErrStaleTimestamp: the timestamp is further from now than the
	// tolerance (an old request replayed, or a clock far off).
	ErrStaleTimestamp = errors.New("timestamp outside the tolerance")
	// ErrBodyTooLarge: VerifyRequest met a body over MaxVerifyBody.
	ErrBodyTooLarge = errors.New("webhook: body too large to verify")
)

func invalid(reason error) error { return fmt.Errorf("%w: %w", ErrInvalidSignature, reason) }

// Verify checks a request signed as the Standard Webhooks specification
// says, as the webhook transport sends it: h holds its webhook-id,
// webhook-timestamp and webhook-signature headers and body is the exact
// bytes received. It succeeds when any "v1," signature in
// webhook-signature (space-separated; there are several while the sender
// rotates keys) matches secret (see DecodeSecret), compared in constant
// time, and the timestamp is within tolerance of now, either way. A zero
// tolerance means DefaultTolerance; a negative one skips the age check
// (only for re-checking stored requests). A receiver that holds several
// keys while it rotates calls Verify with each.
func Verify(secret []byte, h http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	key, err := DecodeSecret(secret)
	if err != nil {
		return err
	}
	id, timestamp, sigs := h.Get(HeaderMessageID), h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if id == "" || timestamp == "" || sigs == "" {
		return invalid(ErrMissingHeaders)
	}
	ts, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return invalid(ErrBadTimestamp)
	}
	if tolerance == 0 {
		tolerance = DefaultTolerance
	}
	if tolerance > 0 {
		age := now.Sub(time.Unix(ts, 0))
		if age > tolerance || age < -tolerance {
			return invalid(fmt.Errorf("%w: sent %v from now", ErrStaleTimestamp, age.Round(time.Second)))
		}
	}
	want := mac(key, id, timestamp, body)
	found := false
	for _, entry := range strings.Fields(sigs) {
		b64, ok := strings.CutPrefix(entry, "v1,")
		if !ok {
			continue // another scheme (such as v1a, asymmetric)
		}
		found = true
		got, err := base64.StdEncoding.DecodeString(b64)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	if !found {
		return invalid(ErrNoSignature)
	}
	return invalid(ErrSignatureMismatch)
}

// VerifyRequest reads r's body (at most MaxVerifyBody bytes) and checks
// it with Verify against the wall clock. It returns the body whenever it
// could read it, also with a verification error, and puts it back as
// r.Body so that a handler can read it again.
func VerifyRequest(r *http.Request, secret []byte, tolerance time.Duration) ([]byte, error) {
	var body []byte
	if r.Body != nil {
		b, err := io.ReadAll(io.LimitReader(r.Body, MaxVerifyBody+1))
		_ = r.Body.Close()
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			// A limit of the server's own (http.MaxBytesReader, a
			// request-size middleware): too large on every try, not a
			// body that did not arrive whole.
			return nil, fmt.Errorf("%w: over the server's limit of %d bytes", ErrBodyTooLarge, mbe.Limit)
		}
		if err != nil {
			return nil, fmt.Errorf("webhook: read body: %w", err)
		}
		if len(b) > MaxVerifyBody {
			return nil, ErrBodyTooLarge
		}
		body = b
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return body, Verify(secret, r.Header, body, time.Now(), tolerance)
}

// RequireSignature returns a handler that passes to next only requests
// whose signature verifies (VerifyRequest), with their body readable
// again. It answers a bad, missing or stale signature 401 Unauthorized, a
// body over MaxVerifyBody (or over the server's own http.MaxBytesReader)
// 413, a body that did not arrive whole (the
// server's ReadTimeout cut a slow sender, or the connection broke) 408,
// and, when secret itself is unusable (empty, or "whsec_" without base64),
// 500. The sender treats 401, 408 and 500 as faults of the destination
// (messages wait, their attempts intact, until the keys agree again or the
// body gets through) and 413 as a permanent fault of the message. A body
// cut short was answered 400, which the sender dead-letters at once,
// although nothing is wrong with the message.
func RequireSignature(secret []byte, tolerance time.Duration, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := VerifyRequest(r, secret, tolerance)
		switch {
		case err == nil:
			next.ServeHTTP(w, r)
		case errors.Is(err, ErrInvalidSignature):
			http.Error(w, err.Error(), http.StatusUnauthorized)
		case errors.Is(err, ErrBodyTooLarge):
			http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
		case errors.Is(err, ErrBadSecret):
			http.Error(w, "webhook: the receiver's secret is unusable", http.StatusInternalServerError)
		default:
			http.Error(w, "webhook: the body did not arrive whole; send it again", http.StatusRequestTimeout)
		}
	})
}
