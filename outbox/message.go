// Package outbox defines the message Backstop delivers and how an
// application writes it: inside its own database transaction, next to its
// business data, so that the message exists if and only if the
// transaction commits.
package outbox

import (
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/errorhandling"
)

// Status is the set of processing flags of a message. Flags are only ever
// added (bitwise OR), never removed, so a retry can resume after the steps
// that already completed. The values are those of the work-coordination
// design and are stored as they are.
type Status int32

// The status flags.
const (
	// StatusStored: the message is stored in the outbox.
	StatusStored Status = 1
	// StatusEventStored: the message was persisted to an event store.
	StatusEventStored Status = 2
	// StatusPublished: the message was delivered to its destination.
	StatusPublished Status = 4
	// StatusFailed: processing failed at least once.
	StatusFailed Status = 32768
)

// Has reports whether every flag of f is set in s.
func (s Status) Has(f Status) bool { return s&f == f }

// String lists the flags set, such as "Stored|Failed".
func (s Status) String() string {
	if s == 0 {
		return "0"
	}
	out := ""
	for _, f := range []struct {
		flag Status
		name string
	}{{StatusStored, "Stored"}, {StatusEventStored, "EventStored"}, {StatusPublished, "Published"}, {StatusFailed, "Failed"}} {
		if s.Has(f.flag) {
			if out != "" {
				out += "|"
			}
			out += f.name
			s &^= f.flag
		}
	}
	if s != 0 {
		if out != "" {
			out += "|"
		}
		out += fmt.Sprintf("0x%x", int32(s))
	}
	return out
}

// Ordering says how a failure affects the later messages of its stream.
type Ordering string

// The ordering modes.
const (
	// OrderingDefault defers to the destination's configured mode.
	OrderingDefault Ordering = ""
	// OrderingStrict: a failed message that waits for its retry holds back
	// every later message of its stream until it is delivered; a
	// dead-lettered one holds the stream until an operator releases the
	// stream or replays the message.
	OrderingStrict Ordering = "strict"
	// OrderingRelease: a failure releases the later messages of the stream
	// and they go on (the cascade release of the design). Only a message
	// being worked (an unexpired lease) holds back later ones.
	OrderingRelease Ordering = "release"
	// OrderingNone: no ordering; the stream key is informational.
	OrderingNone Ordering = "none"
)

// Validate reports an error for an unknown mode.
func (o Ordering) Validate() error {
	switch o {
	case OrderingDefault, OrderingStrict, OrderingRelease, OrderingNone:
		return nil
	}
	return fmt.Errorf("outbox: unknown ordering %q (want strict, release or none)", string(o))
}

// MaxErrorLength is the number of characters of an error message kept with
// a message; longer texts are cut.
const MaxErrorLength = 2000

// TruncateError cuts s to MaxErrorLength characters (runes, not bytes).
func TruncateError(s string) string {
	if len(s) <= MaxErrorLength {
		return s
	}
	r := []rune(s)
	if len(r) <= MaxErrorLength {
		return s
	}
	return string(r[:MaxErrorLength])
}

// Message is one side effect to deliver.
//
// An application sets Destination, Type, Payload and optionally ID, Stream,
// Headers, Ordering and ScheduledFor; the store sets the rest.
type Message struct {
	// ID identifies the message; a UUIDv7 is assigned when zero.
	ID uuid.UUID
	// Destination names where the message goes (a configured webhook,
	// broker subject or handler). Required.
	Destination string
	// Stream is the ordering key: messages of one stream are delivered in
	// the order they were written. Empty means no ordering.
	Stream string
	// Type is the application's name for the message, such as
	// "order.created". Required.
	Type string
	// Payload is the body, delivered as is.
	Payload []byte
	// Headers are delivered with the payload (HTTP headers, broker headers).
	Headers map[string]string
	// Ordering overrides the destination's ordering mode for this message.
	Ordering Ordering
	// ScheduledFor delays the first delivery; zero means now. The store
	// also sets it when it schedules a retry.
	ScheduledFor time.Time

	// Seq is the message's position: order within a stream is by Seq, never
	// by time (rows written in one transaction share a timestamp). Set by
	// the store.
	Seq int64
	// Status holds the processing flags. Set by the store.
	Status Status
	// Attempts is the number of failed attempts charged to the message.
	Attempts int
	// FailureReason is the reason of the last failure.
	FailureReason errorhandling.FailureReason
	// Error is the text of the last failure, at most MaxErrorLength
	// characters.
	Error string
	// Fingerprint groups the last failure with failures like it.
	Fingerprint string
	// InstanceID is the relay instance holding the lease, if any.
	InstanceID string
	// LeaseExpiry is when the lease lapses, if leased.
	LeaseExpiry time.Time
	// CreatedAt is when the message was written.
	CreatedAt time.Time
	// DeadLetteredAt is when the message was moved to the dead-letter
	// queue; zero when it was not.
	DeadLetteredAt time.Time
}

// ErrInvalidMessage is matched (errors.Is) by every validation error.
var ErrInvalidMessage = errors.New("outbox: invalid message")

// Validate checks the fields an application sets and names the first bad
// one.
func (m *Message) Validate() error {
	switch {
	case m == nil:
		return fmt.Errorf("%w: nil message", ErrInvalidMessage)
	case m.Destination == "":
		return fmt.Errorf("%w: destination is required", ErrInvalidMessage)
	case m.Type == "":
		return fmt.Errorf("%w: type is required", ErrInvalidMessage)
	}
	if err := m.Ordering.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidMessage, err)
	}
	return nil
}

// Prepare validates m and assigns a UUIDv7 when its ID is zero. Stores call
// it for every message they enqueue.
func (m *Message) Prepare() error {
	if err := m.Validate(); err != nil {
		return err
	}
	if m.ID == uuid.Nil {
		id, err := uuid.NewV7()
		if err != nil {
			return fmt.Errorf("outbox: new message id: %w", err)
		}
		m.ID = id
	}
	return nil
}
