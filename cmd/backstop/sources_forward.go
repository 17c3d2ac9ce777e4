package main

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/inbox"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// forwarder is the transport of a source's inbox destination: it handles
// a received message by enqueueing one copy of it for each destination of
// the source's forward.to, and completes the message, in one transaction.
// The copies and the completion commit together or not at all, so a
// message is forwarded once however often the source delivered it and
// whatever crashes, and the copies keep the message's stream: the inbox's
// strict order becomes each destination's.
type forwarder struct {
	st store.Inbox
	to []string
}

func (f *forwarder) Deliver(ctx context.Context, m *outbox.Message) error {
	headers := maps.Clone(m.Headers)
	delete(headers, inbox.HeaderID)
	delete(headers, inbox.HeaderSource)
	copies := make([]*outbox.Message, len(f.to))
	for i, to := range f.to {
		copies[i] = &outbox.Message{Destination: to, Stream: m.Stream, Type: m.Type,
			Payload: m.Payload, Headers: headers}
	}
	tx, err := f.st.BeginTx(ctx)
	if err != nil {
		return storeFault(fmt.Errorf("forward: begin: %w", err))
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if err := tx.Enqueue(ctx, copies...); err != nil {
		if errors.Is(err, outbox.ErrInvalidMessage) {
			return errorhandling.WithReason(errorhandling.Permanent(fmt.Errorf("forward: %w", err)), errorhandling.ReasonValidationFailure)
		}
		return storeFault(fmt.Errorf("forward: enqueue: %w", err))
	}
	if err := tx.Complete(ctx, m.ID, m.InstanceID); err != nil {
		if errors.Is(err, store.ErrLeaseLost) {
			// Another instance has the message now: nothing of this
			// attempt is kept.
			return errorhandling.WithCode(errorhandling.Permanent(err), "lease_lost")
		}
		return storeFault(fmt.Errorf("forward: complete: %w", err))
	}
	if err := tx.Commit(ctx); err != nil {
		// Whether it committed is unknown: if it did, the next attempt
		// finds the message completed and keeps nothing.
		return storeFault(fmt.Errorf("forward: commit: %w", err))
	}
	committed = true
	return nil
}

// Close does nothing: the store is serve's.
func (f *forwarder) Close() error { return nil }

// storeFault is a failure of the forwarder's own database work: transient
// and charged to the destination, so the message keeps its attempts.
func storeFault(err error) error {
	return errorhandling.WithBlame(errorhandling.Transient(err), errorhandling.BlameDestination)
}
