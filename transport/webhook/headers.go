package webhook

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/transport"
)

// The headers the transport sets on every request. A message's own
// headers of these names are dropped; Config.Headers may not name them.
// HTTP header names are case-insensitive: the Standard Webhooks
// specification writes webhook-id, Go's canonical form is Webhook-Id.
const (
	// HeaderMessageID is the Standard Webhooks webhook-id: the message id.
	// Receivers de-duplicate re-sends with it (delivery is at least once).
	HeaderMessageID = "Webhook-Id"
	// HeaderTimestamp is the Standard Webhooks webhook-timestamp: the time
	// of sending in Unix seconds; it is part of what is signed.
	HeaderTimestamp = "Webhook-Timestamp"
	// HeaderSignature is the Standard Webhooks webhook-signature: one
	// "v1,<base64>" signature per secret, separated by spaces; absent when
	// Config.Secret is empty.
	HeaderSignature = "Webhook-Signature"
	// HeaderStream carries the message's stream; absent when it has none.
	HeaderStream = "Backstop-Stream"
	// HeaderType carries the message's type.
	HeaderType = "Backstop-Type"
	// HeaderAttempt carries the number of this delivery attempt, from 1.
	HeaderAttempt = "Backstop-Attempt"
)

// userAgent is sent unless the message or Config.Headers set one.
const userAgent = "Backstop-Webhook/1"

// isReserved reports whether name (canonical) is set by the transport.
func isReserved(name string) bool {
	switch name {
	case HeaderMessageID, HeaderTimestamp, HeaderSignature:
		return true
	}
	return strings.HasPrefix(name, "Backstop-")
}

// managedByHTTP lists the headers HTTP itself sets or consumes hop by hop
// (RFC 9110, section 7.6.1, and Host, Content-Length): a request cannot
// carry a value of its own for them.
var managedByHTTP = map[string]bool{
	"Connection": true, "Content-Length": true, "Host": true, "Keep-Alive": true,
	"Proxy-Connection": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
}

// checkConfigHeader refuses a header of Config.Headers that is invalid
// (by the rules of a message's headers), set by the transport or managed
// by HTTP.
func checkConfigHeader(name, value string) error {
	m := outbox.Message{Destination: "config", Type: "config", Headers: map[string]string{name: value}}
	if err := m.Validate(); err != nil {
		var fe *outbox.FieldError
		if errors.As(err, &fe) {
			return fmt.Errorf("%s %s", fe.Field, fe.Problem)
		}
		return err
	}
	canonical := http.CanonicalHeaderKey(name)
	switch {
	case isReserved(canonical):
		return fmt.Errorf("%s is set by the transport", canonical)
	case managedByHTTP[canonical]:
		return fmt.Errorf("%s is managed by HTTP itself", canonical)
	}
	return nil
}

// checkMessage refuses what m cannot carry over HTTP beyond outbox's own
// rules: a header HTTP manages itself, two headers that differ only in
// case (HTTP would make them one), or a stream, type or header value that
// starts or ends with a blank (HTTP drops those blanks, RFC 9110 section
// 5.5: the receiver would get another value).
func checkMessage(m *outbox.Message, limits outbox.Limits) error {
	if err := m.ValidateLimits(limits); err != nil {
		return err
	}
	for _, f := range []struct{ field, value string }{{"type", m.Type}, {"stream", m.Stream}} {
		if blankEdged(f.value) {
			return &outbox.FieldError{Field: f.field, Problem: "starts or ends with a blank, which HTTP drops"}
		}
	}
	if len(m.Headers) == 0 {
		return nil
	}
	seen := make(map[string]string, len(m.Headers))
	for name, value := range m.Headers {
		if blankEdged(value) {
			return &outbox.FieldError{Field: fmt.Sprintf("header %.40q", name), Problem: "value starts or ends with a blank, which HTTP drops"}
		}
		canonical := http.CanonicalHeaderKey(name)
		if managedByHTTP[canonical] {
			return &outbox.FieldError{Field: fmt.Sprintf("header %.40q", name), Problem: "is managed by HTTP itself and cannot be sent"}
		}
		if other, dup := seen[canonical]; dup {
			a, b := min(name, other), max(name, other)
			return &outbox.FieldError{Field: fmt.Sprintf("headers %.40q and %.40q", a, b), Problem: "are one HTTP header"}
		}
		seen[canonical] = name
	}
	return nil
}

// blankEdged reports whether s starts or ends with a space or a tab.
func blankEdged(s string) bool {
	return s != "" && (s[0] == ' ' || s[0] == '\t' || s[len(s)-1] == ' ' || s[len(s)-1] == '\t')
}

// setHeaders fills h for m: m's headers, then Config.Headers, the
// defaults, and the transport's own headers. ts is the webhook-timestamp.
func (t *Transport) setHeaders(h http.Header, m *outbox.Message, ts string) {
	for k, v := range m.Headers {
		if !isReserved(http.CanonicalHeaderKey(k)) {
			h.Set(k, v)
		}
	}
	for k, v := range t.headers {
		h[k] = v
	}
	if h.Get("Content-Type") == "" {
		h.Set("Content-Type", "application/json")
	}
	if h.Get("User-Agent") == "" {
		h.Set("User-Agent", userAgent)
	}
	id := m.ID.String()
	h.Set(HeaderMessageID, id)
	h.Set(HeaderTimestamp, ts)
	if len(t.keys) > 0 {
		h.Set(HeaderSignature, signAll(t.keys, id, ts, m.Payload))
	}
	if m.Stream != "" {
		h.Set(HeaderStream, m.Stream)
	}
	h.Set(HeaderType, m.Type)
	h.Set(HeaderAttempt, strconv.Itoa(transport.Attempt(m)))
}
