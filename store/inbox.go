package store

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/outbox"
)

// ErrIDReused is matched by Inbox.Receive's error for a message id that
// was recorded for a message of another content (type or payload): not a
// redelivery of that message but another one under its id. Nothing is
// written; the error is an *IDReusedError.
var ErrIDReused = errors.New("store: inbox message id received before for another message")

// IDReusedError is Inbox.Receive's error for a message id recorded for a
// message of another content. It matches ErrIDReused.
type IDReusedError struct {
	Inbox, MessageID string
	// RowID is the outbox row the id was first stored as (zero when its
	// record was written before stores named it).
	RowID uuid.UUID
	// ReceivedAt is when the id was first received, by the store's clock.
	ReceivedAt time.Time
}

func (e *IDReusedError) Error() string {
	first := "first received at " + e.ReceivedAt.UTC().Format(time.RFC3339Nano)
	if e.RowID != uuid.Nil {
		first += " as row " + e.RowID.String()
	}
	return fmt.Sprintf("inbox %q: message id %s was %s with another type or payload", e.Inbox, strconv.QuoteToASCII(e.MessageID), first)
}

func (e *IDReusedError) Unwrap() error { return ErrIDReused }

// InboxDigest is the digest of m's content (type and payload) that an
// inbox's de-duplication record keeps, so that a message id received
// again with another content is told from a redelivery (ErrIDReused).
// Headers, stream and the time it was sent are left out: a source's
// redelivery may change them.
func InboxDigest(m *outbox.Message) []byte {
	h := sha256.New()
	h.Write([]byte(strconv.Itoa(len(m.Type))))
	h.Write([]byte{':'})
	h.Write([]byte(m.Type))
	h.Write(m.Payload)
	return h.Sum(nil)
}
