// Package outbox defines the message Backstop delivers and how an
// application writes it: inside its own database transaction, next to its
// business data, so that the message exists if and only if the
// transaction commits.
package outbox

import (
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

// Message is one side effect to deliver.
//
// An application sets Destination, Type, Payload and optionally ID, Stream,
// Headers, Ordering and ScheduledFor; the store sets the rest.
type Message struct {
	// ID identifies the message; a UUIDv7 is assigned when zero.
	ID uuid.UUID
	// Destination names where the message goes (a configured webhook,
	// broker subject or handler). Required: printable UTF-8, at most
	// Limits.MaxDestinationLen bytes.
	Destination string
	// Stream is the ordering key: messages of one stream are delivered in
	// the order they were written. Empty means no ordering. Printable
	// UTF-8, at most Limits.MaxStreamLen bytes.
	Stream string
	// Type is the application's name for the message, such as
	// "order.created". Required: printable UTF-8, at most
	// Limits.MaxTypeLen bytes.
	Type string
	// Payload is the body, delivered as is; at most
	// Limits.MaxPayloadBytes.
	Payload []byte
	// Headers are delivered with the payload (HTTP headers, broker
	// headers). Names are HTTP tokens; values are UTF-8 without control
	// characters other than tab; see Limits for how many and how large.
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
	// Error is the text of the last failure, cleaned by TruncateError:
	// valid UTF-8, no NUL, at most MaxErrorLength characters.
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

// Prepare validates m against the default Limits and assigns a UUIDv7
// when its ID is zero. Stores call it for every message they enqueue.
func (m *Message) Prepare() error { return m.PrepareLimits(Limits{}) }

// PrepareLimits is Prepare with the given limits (see ValidateLimits).
func (m *Message) PrepareLimits(l Limits) error {
	if err := m.ValidateLimits(l); err != nil {
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
