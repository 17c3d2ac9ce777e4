package natstransport

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/transport"
)

// The headers every published message carries, next to Nats-Msg-Id.
const (
	HeaderMessageID = "Backstop-Message-Id"
	HeaderStream    = "Backstop-Stream"
	HeaderType      = "Backstop-Type"
	HeaderAttempt   = "Backstop-Attempt"
)

// reservedPrefix starts the names of the headers NATS and JetStream act
// on (Nats-Msg-Id, Nats-Expected-Stream, Nats-Expected-Last-Sequence,
// Nats-Expected-Last-Msg-Id, Nats-Expected-Last-Subject-Sequence,
// Nats-Rollup, Nats-TTL and those of later servers).
const reservedPrefix = "nats-"

// IsReservedHeader reports whether name is a header NATS reserves: one
// that starts with "Nats-", in any case. Unless Config.AllowReservedHeaders
// is set, a message's reserved headers are dropped.
func IsReservedHeader(name string) bool {
	return len(name) >= len(reservedPrefix) && strings.EqualFold(name[:len(reservedPrefix)], reservedPrefix)
}

// isBackstopHeader reports whether name is one of the headers the
// transport sets, in any case.
func isBackstopHeader(name string) bool {
	for _, b := range [...]string{HeaderMessageID, HeaderStream, HeaderType, HeaderAttempt} {
		if strings.EqualFold(name, b) {
			return true
		}
	}
	return false
}

// setHeaders fills h for m: its headers (without the reserved ones unless
// allowReserved, and never Nats-Msg-Id, nor Nats-Expected-Stream when
// expectStream: the transport sets those), then Backstop's. A message
// header named like one of Backstop's in any case is dropped: nats.Header
// is case-sensitive, and "backstop-message-id: forged" travelled beside
// the real Backstop-Message-Id for a consumer that matches names in any
// case to read.
func setHeaders(h nats.Header, m *outbox.Message, allowReserved, expectStream bool) {
	for k, v := range m.Headers {
		switch {
		case isBackstopHeader(k):
			continue
		case !IsReservedHeader(k):
		case !allowReserved, strings.EqualFold(k, jetstream.MsgIDHeader),
			expectStream && strings.EqualFold(k, jetstream.ExpectedStreamHeader):
			continue
		}
		h.Set(k, v)
	}
	h.Set(HeaderMessageID, m.ID.String())
	h.Set(HeaderType, m.Type)
	h.Set(HeaderAttempt, strconv.Itoa(transport.Attempt(m)))
	if m.Stream != "" {
		h.Set(HeaderStream, m.Stream)
	}
}

// checkBlankEdges refuses a message whose stream, type or a header value
// it sends (h, filled by setHeaders) starts or ends with a blank: the
// NATS client trims such blanks as it publishes (as HTTP drops them), so
// consumers would read another value than the message's. When several
// headers are bad, the one with the smallest name is reported.
func checkBlankEdges(m *outbox.Message, h nats.Header) error {
	for _, f := range []struct{ field, value string }{{"type", m.Type}, {"stream", m.Stream}} {
		if blankEdged(f.value) {
			return &outbox.FieldError{Field: f.field, Problem: "starts or ends with a blank, which NATS clients drop"}
		}
	}
	bad := ""
	for name, values := range h {
		if isBackstopHeader(name) || (bad != "" && name >= bad) {
			continue
		}
		for _, v := range values {
			if blankEdged(v) {
				bad = name
			}
		}
	}
	if bad != "" {
		return &outbox.FieldError{Field: fmt.Sprintf("header %.40q", bad), Problem: "value starts or ends with a blank, which NATS clients drop"}
	}
	return nil
}

// blankEdged reports whether s starts or ends with a space or a tab.
func blankEdged(s string) bool {
	return s != "" && (s[0] == ' ' || s[0] == '\t' || s[len(s)-1] == ' ' || s[len(s)-1] == '\t')
}
