package webhook

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// DefaultTolerance is how far a request's timestamp may be from the
// receiver's clock when Verify is given a zero tolerance.
const DefaultTolerance = 5 * time.Minute

// MaxVerifyBody is the largest body VerifyRequest reads.
const MaxVerifyBody = 16 << 20

// Errors of Verify and VerifyRequest. Every verification failure matches
// ErrInvalidSignature, and also the more precise error named here.
var (
	// ErrInvalidSignature is matched by every verification failure.
	ErrInvalidSignature = errors.New("webhook: invalid signature")
	// ErrNoSignature: the request carries no v1 signature.
	ErrNoSignature = errors.New("no v1 signature")
	// ErrSignatureMismatch: no signature of the request matches the key.
	ErrSignatureMismatch = errors.New("signature does not match")
	// ErrBadTimestamp: the timestamp is missing or not Unix seconds.
	ErrBadTimestamp = errors.New("timestamp is not Unix seconds")
	// ErrStaleTimestamp: the timestamp is further from now than the
	// tolerance (an old request replayed, or a clock far off).
	ErrStaleTimestamp = errors.New("timestamp outside the tolerance")
	// ErrNoSecret: Verify was given an empty key, which verifies nothing.
	ErrNoSecret = errors.New("empty secret")
	// ErrBodyTooLarge: VerifyRequest met a body over MaxVerifyBody.
	ErrBodyTooLarge = errors.New("webhook: body too large to verify")
)

// Sign returns the Backstop-Signature value for body sent at timestamp
// (Unix seconds, as in Backstop-Timestamp) with secret:
// "v1=" + hex(HMAC-SHA256(secret, timestamp + "." + body)).
func Sign(secret []byte, timestamp string, body []byte) string {
	return "v1=" + hex.EncodeToString(mac(secret, timestamp, body))
}

// sign returns the signatures of every secret, comma-separated.
func sign(secrets [][]byte, timestamp string, body []byte) string {
	sigs := make([]string, len(secrets))
	for i, s := range secrets {
		sigs[i] = Sign(s, timestamp, body)
	}
	return strings.Join(sigs, ",")
}

func mac(secret []byte, timestamp string, body []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(timestamp))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

func invalid(reason error) error { return fmt.Errorf("%w: %w", ErrInvalidSignature, reason) }

// Verify checks a request the webhook transport sent: timestamp is its
// Backstop-Timestamp header, signatureHeader its Backstop-Signature header
// and body the exact bytes received. It succeeds when any "v1=" signature
// in the header (there are several while the sender rotates keys) matches
// secret, compared in constant time, and the timestamp is within
// tolerance of now, either way. A zero tolerance means DefaultTolerance;
// a negative one skips the age check (only for re-checking stored
// requests). A receiver that holds several keys while it rotates calls
// Verify with each.
func Verify(secret []byte, timestamp, signatureHeader string, body []byte, now time.Time, tolerance time.Duration) error {
	if len(secret) == 0 {
		return invalid(ErrNoSecret)
	}
	ts, err := strconv.ParseInt(strings.TrimSpace(timestamp), 10, 64)
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
	want := mac(secret, strings.TrimSpace(timestamp), body)
	found := false
	for part := range strings.SplitSeq(signatureHeader, ",") {
		hexSig, ok := strings.CutPrefix(strings.TrimSpace(part), "v1=")
		if !ok {
			continue // another scheme, for a later version
		}
		found = true
		got, err := hex.DecodeString(hexSig)
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
// its signature with Verify against the wall clock. It returns the body
// whenever it could read it, also with a verification error, and puts it
// back as r.Body so that a handler can read it again.
func VerifyRequest(r *http.Request, secret []byte, tolerance time.Duration) ([]byte, error) {
	var body []byte
	if r.Body != nil {
		b, err := io.ReadAll(io.LimitReader(r.Body, MaxVerifyBody+1))
		_ = r.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("webhook: read body: %w", err)
		}
		if len(b) > MaxVerifyBody {
			return nil, ErrBodyTooLarge
		}
		body = b
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	err := Verify(secret, r.Header.Get(HeaderTimestamp), r.Header.Get(HeaderSignature), body, time.Now(), tolerance)
	return body, err
}

// RequireSignature returns a handler that passes to next only requests
// whose signature verifies (VerifyRequest), with their body readable
// again. It answers others 401 Unauthorized, a body over MaxVerifyBody
// 413, and a body it cannot read 400. The sender treats 401 as a fault of
// the destination (messages wait, their attempts intact, until the keys
// agree again) and 413 as a permanent fault of the message.
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
		default:
			http.Error(w, "webhook: cannot read body", http.StatusBadRequest)
		}
	})
}
