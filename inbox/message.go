package inbox

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/transport"
)

// The headers under which a row keeps what the inbox needs beyond the
// outbox's columns. Headers of these names that a source sends are
// replaced.
const (
	// HeaderID holds the source message id (the de-duplication key).
	HeaderID = "Backstop-Inbox-Id"
	// HeaderSource names the receiver that took the message, such as
	// "nats", "amqp" or "http".
	HeaderSource = "Backstop-Inbox-Source"
)

// Received is a message as a receiver hands it to Receive.
type Received struct {
	// ID is the source's message id, the de-duplication key: a message
	// received again with the same ID within the inbox's DedupWindow is
	// dropped. Required: 1 to MaxIDLen bytes of printable UTF-8. IDs are
	// one space per inbox, across all its receivers and sources: two
	// sources whose ids may coincide (two publishers numbering from 1)
	// need an inbox each, or the later of two messages under one id is
	// refused (ErrIDReused), or dropped when its type and payload are the
	// same.
	ID string
	// Type is the message type, which selects the handler. Required.
	Type string
	// Stream is the ordering key; empty means no ordering.
	Stream string
	// Payload is the body, as received.
	Payload []byte
	// Headers are the source's headers worth keeping (see each receiver).
	Headers map[string]string
	// Source names the receiver, such as "nats"; it labels the metrics.
	// Empty means "custom". Like ID, 1 to MaxSourceLen bytes of printable
	// UTF-8; a message with another is refused, counted under "invalid".
	Source string
}

// Message is a received message as a handler sees it.
type Message struct {
	// ID is the source's message id.
	ID string
	// Inbox is the inbox's name.
	Inbox string
	// Source names the receiver that took it ("nats", "amqp", "http").
	Source string
	// Type, Stream, Payload and Headers are as received (Headers without
	// the inbox's own).
	Type    string
	Stream  string
	Payload []byte
	Headers map[string]string
	// Attempt is the number of this attempt, from 1: one more than the
	// failed attempts charged to the message.
	Attempt int
	// RowID is the id of the message's row in the outbox table, the id
	// the operator tools and the dead-letter queue show.
	RowID uuid.UUID
	// ReceivedAt is when the row was written.
	ReceivedAt time.Time
}

// ErrInvalid is matched by Receive's error for a message that cannot be
// stored: no id or type, a control character, a header that is not a
// token, a payload over the limit. Receivers refuse such a message
// (terminate, reject, 400) instead of asking for it again.
var ErrInvalid = errors.New("inbox: invalid message")

// MaxSourceLen is the longest Received.Source, in bytes.
const MaxSourceLen = 64

// ownHeaderBytes is the most the inbox's own two headers add to a row's
// header bytes.
const ownHeaderBytes = len(HeaderID) + MaxIDLen + len(HeaderSource) + MaxSourceLen

// row makes the outbox row of r for the inbox named name. The source's
// message is checked against limits before the inbox adds its own two
// headers, which count against no limit: a message that a Backstop outbox
// sent with the most headers its limits allow is taken.
func (r *Received) row(name string, limits outbox.Limits) (*outbox.Message, error) {
	if problem := checkPrintable(r.ID, MaxIDLen); problem != "" {
		return nil, fmt.Errorf("%w: id %s", ErrInvalid, problem)
	}
	source := r.source()
	if problem := checkPrintable(source, MaxSourceLen); problem != "" {
		return nil, fmt.Errorf("%w: source %s", ErrInvalid, problem)
	}
	h := make(map[string]string, len(r.Headers)+2)
	for k, v := range r.Headers {
		if !strings.EqualFold(k, HeaderID) && !strings.EqualFold(k, HeaderSource) {
			h[k] = v
		}
	}
	m := &outbox.Message{
		Destination: Destination(name), Stream: r.Stream, Type: r.Type,
		Payload: r.Payload, Headers: h,
	}
	if err := m.PrepareLimits(limits); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	h[HeaderID] = r.ID
	h[HeaderSource] = source
	return m, nil
}

// checkPrintable returns what is wrong with s, an id or a source name, or
// "": it must be 1 to max bytes of UTF-8 without control characters (tab
// included).
func checkPrintable(s string, max int) string {
	if s == "" || len(s) > max {
		return fmt.Sprintf("must be 1 to %d bytes, got %d", max, len(s))
	}
	if !utf8.ValidString(s) {
		return "is not valid UTF-8"
	}
	for i, c := range s {
		if unicode.IsControl(c) {
			return fmt.Sprintf("holds control character U+%04X at byte %d", c, i)
		}
	}
	return ""
}

func (r *Received) source() string {
	if r.Source == "" {
		return "custom"
	}
	return r.Source
}

// messageOf is the handler's view of a claimed row.
func messageOf(name string, m *outbox.Message) *Message {
	h := maps.Clone(m.Headers)
	id, source := h[HeaderID], h[HeaderSource]
	delete(h, HeaderID)
	delete(h, HeaderSource)
	if h == nil {
		h = map[string]string{}
	}
	return &Message{
		ID: id, Inbox: name, Source: source,
		Type: m.Type, Stream: m.Stream, Payload: m.Payload, Headers: h,
		Attempt: transport.Attempt(m), RowID: m.ID, ReceivedAt: m.CreatedAt,
	}
}
