package natstransport

import (
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

// setHeaders fills h for m: its headers (without the reserved ones unless
// allowReserved, and never Nats-Msg-Id, nor Nats-Expected-Stream when
// expectStream: the transport sets those), then Backstop's, which win
// over a message header of the same name.
func setHeaders(h nats.Header, m *outbox.Message, allowReserved, expectStream bool) {
	for k, v := range m.Headers {
		switch {
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
