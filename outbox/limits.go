package outbox

import (
	"errors"
	"fmt"
)

// The defaults of Limits.
const (
	// DefaultMaxPayloadBytes is the largest payload: 1 MiB.
	DefaultMaxPayloadBytes = 1 << 20
	// DefaultMaxHeaders is the most headers one message carries.
	DefaultMaxHeaders = 64
	// DefaultMaxHeaderBytes bounds the sum of the lengths of a message's
	// header names and values: 16 KiB.
	DefaultMaxHeaderBytes = 16 << 10
	// DefaultMaxDestinationLen is the longest destination, in bytes.
	DefaultMaxDestinationLen = 200
	// DefaultMaxStreamLen is the longest stream key, in bytes.
	DefaultMaxStreamLen = 200
	// DefaultMaxTypeLen is the longest type, in bytes.
	DefaultMaxTypeLen = 200
)

// MaxLimits are the largest values a Limits field may take: what both
// stores can keep and index. A longer destination or stream would not fit
// a PostgreSQL index entry (at most about 2.7 KB for the two together),
// and larger payloads or headers would make a batch of claimed messages
// a memory hazard. A store checks what an inbox hands it against these,
// the inbox having checked its own, lower, Limits.
var MaxLimits = Limits{
	MaxPayloadBytes:   64 << 20,
	MaxHeaders:        1024,
	MaxHeaderBytes:    1 << 20,
	MaxDestinationLen: 1024,
	MaxStreamLen:      1024,
	MaxTypeLen:        1024,
}

// ErrInvalidLimits is matched (errors.Is) by the error of a Limits with a
// negative field or one over MaxLimits.
var ErrInvalidLimits = errors.New("outbox: invalid limits")

// Limits bounds what one message may hold. Every length is in bytes. The
// zero value means every default, and each zero field means that field's
// default; a negative field, or one over MaxLimits, is invalid
// (Validate). A message over a limit
// is refused at enqueue and, when a relay checks it again at claim, is a
// permanent fault of the message: it is dead-lettered, never dropped.
type Limits struct {
	// MaxPayloadBytes is the largest payload. Zero means
	// DefaultMaxPayloadBytes (1 MiB).
	MaxPayloadBytes int
	// MaxHeaders is the most headers a message may carry. Zero means
	// DefaultMaxHeaders (64).
	MaxHeaders int
	// MaxHeaderBytes bounds the sum of the lengths of every header name
	// and value. Zero means DefaultMaxHeaderBytes (16 KiB).
	MaxHeaderBytes int
	// MaxDestinationLen is the longest destination. Zero means
	// DefaultMaxDestinationLen (200).
	MaxDestinationLen int
	// MaxStreamLen is the longest stream key. Zero means
	// DefaultMaxStreamLen (200).
	MaxStreamLen int
	// MaxTypeLen is the longest type. Zero means DefaultMaxTypeLen (200).
	MaxTypeLen int
}

// WithDefaults returns l with every zero field set to its default.
func (l Limits) WithDefaults() Limits {
	for _, f := range l.fields() {
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	return l
}

// Validate reports a negative field, or one over MaxLimits, naming it,
// with an error matching ErrInvalidLimits.
func (l Limits) Validate() error {
	ceiling := MaxLimits
	top := ceiling.fields()
	for i, f := range l.fields() {
		if *f.v < 0 {
			return fmt.Errorf("%w: Limits.%s is negative (%d)", ErrInvalidLimits, f.name, *f.v)
		}
		if *f.v > *top[i].v {
			return fmt.Errorf("%w: Limits.%s is %d, over the most a store keeps (%d)", ErrInvalidLimits, f.name, *f.v, *top[i].v)
		}
	}
	return nil
}

// limitField is one field of Limits, for WithDefaults and Validate.
type limitField struct {
	name string
	v    *int
	def  int
}

// fields lists l's fields; the pointers point into l.
func (l *Limits) fields() []limitField {
	return []limitField{
		{"MaxPayloadBytes", &l.MaxPayloadBytes, DefaultMaxPayloadBytes},
		{"MaxHeaders", &l.MaxHeaders, DefaultMaxHeaders},
		{"MaxHeaderBytes", &l.MaxHeaderBytes, DefaultMaxHeaderBytes},
		{"MaxDestinationLen", &l.MaxDestinationLen, DefaultMaxDestinationLen},
		{"MaxStreamLen", &l.MaxStreamLen, DefaultMaxStreamLen},
		{"MaxTypeLen", &l.MaxTypeLen, DefaultMaxTypeLen},
	}
}
