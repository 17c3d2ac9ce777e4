package inbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/inbox/internal/headers"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// parkedNameRunes bounds the type and stream a refused message's entry
// keeps (the outbox's own names are at most 1,024 bytes).
const parkedNameRunes = 200

// park keeps a message Receive refuses as a dead letter of the inbox's
// destination, with why it was refused, so that it is not lost with the
// refusal: a broker's receiver terminates or rejects a refused message,
// and a stream without a dead-letter exchange of its own forgets it.
// The entry holds the message as far as it can be stored: texts cleaned
// (invalid UTF-8 and NUL replaced, cut), the payload unless it is over
// the inbox's limit, the headers that fit it. Its ID comes from the
// message's content, so a message refused again (redelivered before the
// refusal reached the source) is parked once. It cannot be replayed: it
// was never stored as a message; an operator reads it and resolves it.
//
// It returns nil once the entry is kept, or the store's error, which is
// not ErrInvalid: the receiver then asks the source for the message again
// instead of refusing it, and nothing is lost while the store is out of
// reach.
func (in *Inbox) park(ctx context.Context, r *Received, source string, refusal error) error {
	e := &dlq.Entry{
		ID:          parkedID(in.name, source, r),
		Destination: in.dest,
		Type:        outbox.CleanText(r.Type, parkedNameRunes),
		Stream:      outbox.CleanText(r.Stream, parkedNameRunes),
		Headers:     parkedHeaders(r.Headers, in.cfg.Limits),
		Reason:      errorhandling.ReasonValidationFailure,
		FailureTime: in.clk.Now(),
		// The error names the field at fault; its quoted id or text
		// varies, so the fingerprint groups by the refusal's kind.
		ErrorMessage: outbox.TruncateError(refusal.Error()),
		Fingerprint:  errorhandling.Fingerprint(refusal),
		Metadata: map[string]any{
			"refused_by": "inbox receive",
			"source":     source,
			// Quoted: an id that is not text, or holds control
			// characters, is shown as it came.
			"source_id": outbox.CleanText(strconv.QuoteToASCII(r.ID), 2*MaxIDLen),
		},
	}
	var reused *store.IDReusedError
	if errors.As(refusal, &reused) {
		e.Metadata["first_received_at"] = reused.ReceivedAt.UTC().Format(time.RFC3339Nano)
		if reused.RowID != uuid.Nil {
			e.Metadata["first_row_id"] = reused.RowID.String()
		}
	}
	if len(r.Payload) <= in.cfg.Limits.MaxPayloadBytes {
		e.Payload = r.Payload
	} else {
		e.Metadata["payload_dropped"] = true
		e.Metadata["payload_bytes"] = len(r.Payload)
	}
	err := in.store.DLQ().Add(ctx, e)
	if errors.Is(err, dlq.ErrExists) {
		return nil // parked when it was refused before
	}
	if err != nil {
		return fmt.Errorf("inbox %q: keep the refused message %s as a dead letter: %w", in.name, strconv.QuoteToASCII(outbox.CleanText(r.ID, 64)), err)
	}
	if m := in.cfg.Relay.DeadLetters; m != nil {
		m.Notify(ctx, e) // logged, its callbacks and threshold, as for the relay's
		return nil
	}
	in.log.LogAttrs(ctx, slog.LevelWarn, "refused message kept as a dead letter",
		slog.String("source", source), slog.String("entry", e.ID), slog.String("reason", e.ErrorMessage))
	return nil
}

// parkedID is the dead-letter ID of a refused message: the same message
// refused again gets the same one.
func parkedID(name, source string, r *Received) string {
	h := sha256.New()
	for _, s := range []string{name, source, r.ID, r.Type, r.Stream} {
		h.Write([]byte(strconv.Itoa(len(s))))
		h.Write([]byte{':'})
		h.Write([]byte(s))
	}
	h.Write(r.Payload)
	return "inbox-refused-" + hex.EncodeToString(h.Sum(nil)[:16])
}

// parkedHeaders are the headers of a refused message that a message could
// carry (headers.Kept, in name order until the limits are reached).
func parkedHeaders(hs map[string]string, limits outbox.Limits) map[string]string {
	keys := make([]string, 0, len(hs))
	for k := range hs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	kept := headers.Within(limits)
	for _, k := range keys {
		kept.Add(k, hs[k])
	}
	return kept.Headers
}
