package inbox

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// deliver is the inbox's transport: it runs the handler of m's type.
func (in *Inbox) deliver(ctx context.Context, m *outbox.Message) error {
	h, ok := in.handler(m.Type)
	if !ok {
		return in.noHandler(ctx, m)
	}
	msg := messageOf(in.name, m)
	if h.fn != nil {
		return in.attemptError(ctx, errorhandling.EndlessChain(h.fn(ctx, msg)))
	}
	return in.deliverTx(ctx, h.tx, m, msg)
}

// deliverTx runs a transactional handler and commits its effects with the
// message's completion.
func (in *Inbox) deliverTx(ctx context.Context, h Handler, m *outbox.Message, msg *Message) error {
	tx, err := in.inbox.BeginTx(ctx)
	if err != nil {
		return storeFault(fmt.Errorf("inbox %q: begin: %w", in.name, err))
	}
	ended := false
	defer func() {
		if !ended {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	htx := &handlerTx{Tx: tx}
	// The inbox walks the handler's error (errors.Is) before the relay
	// does: one whose Unwrap chain never ends would hold it for good.
	err = errorhandling.EndlessChain(h(ctx, htx, msg))
	if err == nil && htx.rolledBack.Load() {
		// Nothing the handler wrote is kept, and the completion cannot be
		// written in the ended transaction: taken for the database's
		// fault, the message was handled again and again, never charged.
		err = fmt.Errorf("inbox %q: the handler rolled back its transaction and returned nil, so nothing it wrote is kept: "+
			"return an error to roll back", in.name)
	}
	if err != nil {
		ended = true
		rerr := tx.Rollback(context.WithoutCancel(ctx))
		if !timedOut(ctx) && (errors.Is(err, store.ErrUnavailable) || errors.Is(rerr, store.ErrUnavailable)) {
			// The handler failed because the transaction's connection
			// was lost (a database restart, a failover): not the
			// message's fault, so it keeps its attempts. An attempt that
			// ran out of its time is the handler's, whatever that did
			// to the connection.
			return storeFault(fmt.Errorf("inbox %q: the database was lost during the handler: %w", in.name, err))
		}
		return in.attemptError(ctx, err)
	}
	if err := tx.Complete(ctx, m.ID, m.InstanceID); err != nil {
		if timedOut(ctx) {
			// The handler returned past the attempt's time, and nothing
			// it wrote is kept: the handler's fault, as a timeout is.
			return in.attemptError(ctx, fmt.Errorf("inbox %q: complete: %w", in.name, err))
		}
		if b, ok := errorhandling.BlameOf(err); ok && b == errorhandling.BlameMessage {
			// The store says the handler's transaction cannot complete
			// for what the handler did in it (PostgreSQL: a statement
			// failed, its error ignored, and the transaction aborted):
			// the handler's fault, charged like its own error.
			return in.attemptError(ctx, messageFault(fmt.Errorf("inbox %q: complete: %w", in.name, err), errorhandling.ReasonHandlerException))
		}
		if errors.Is(err, store.ErrLeaseLost) {
			// Another instance has the message now (or an operator
			// dead-lettered it): nothing of this attempt is kept, and
			// the relay's record of it is stale.
			return errorhandling.WithCode(errorhandling.Permanent(err), "lease_lost")
		}
		return storeFault(fmt.Errorf("inbox %q: complete: %w", in.name, err))
	}
	if err := tx.Commit(ctx); err != nil {
		// Whether it committed is unknown: if it did, the next attempt
		// finds the message completed and keeps nothing.
		return storeFault(fmt.Errorf("inbox %q: commit: %w", in.name, err))
	}
	ended = true
	if in.afterCommit != nil {
		in.afterCommit(msg)
	}
	return nil
}

// ErrTxManaged is returned by the Commit of the transaction a handler is
// given: the inbox commits it, with the message's completion, when the
// handler returns nil.
var ErrTxManaged = errors.New("inbox: the handler's transaction is committed by the inbox when the handler returns nil; do not commit it")

// handlerTx is the transaction a handler is given. Its Commit is refused:
// a handler that committed its effects itself left the message
// uncompleted, and the completion failed on the ended transaction as if
// the database had, so the message ran again, uncharged, committing its
// effects each time. Its Rollback rolls back, as before; a handler that
// rolls back and returns nil fails its attempt (deliverTx).
type handlerTx struct {
	store.Tx
	rolledBack atomic.Bool
}

func (t *handlerTx) Commit(context.Context) error { return ErrTxManaged }

func (t *handlerTx) Rollback(ctx context.Context) error {
	t.rolledBack.Store(true)
	return t.Tx.Rollback(ctx)
}

// attemptError is handlerError, except for an attempt that ran out of its
// time (the relay's Timeout for the inbox's destination): that is the
// message's fault, a transient one with reason TimeoutExceeded, so that it
// uses up its attempts and is dead-lettered when they run out. Left to the
// classifier, a deadline blames the destination (right for a webhook that
// does not answer), which charges nothing: a handler that never finishes
// on one message was retried for ever, and held its stream. A handler
// that wants a destination's treatment (an outage of what it calls) says
// so with errorhandling.WithBlame.
//
// So is a handler's context.Canceled while the attempt's context is not
// done: the classifier takes a cancellation for the relay's shutdown and
// blames the destination, but this one is of the handler's own making (a
// call it cancelled itself), and it failed the same way on every try,
// never charged, holding its stream for ever. It is the message's fault,
// reason HandlerException.
func (in *Inbox) attemptError(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case timedOut(ctx):
		return messageFault(err, errorhandling.ReasonTimeoutExceeded)
	case ctx.Err() == nil && errors.Is(err, context.Canceled):
		return messageFault(err, errorhandling.ReasonHandlerException)
	}
	return in.handlerError(err)
}

// messageFault marks err, where the handler did not say otherwise, as a
// transient fault of the message with reason.
func messageFault(err error, reason errorhandling.FailureReason) error {
	if _, ok := errorhandling.MarkedClass(err); !ok {
		err = errorhandling.Transient(err)
	}
	if _, ok := errorhandling.BlameOf(err); !ok {
		err = errorhandling.WithBlame(err, errorhandling.BlameMessage)
	}
	if _, ok := errorhandling.ReasonOf(err); !ok {
		err = errorhandling.WithReason(err, reason)
	}
	return err
}

// timedOut reports whether the attempt's context ran out of time.
func timedOut(ctx context.Context) bool { return errors.Is(ctx.Err(), context.DeadlineExceeded) }

// handlerError marks a handler's error that the classifier knows nothing
// about with reason HandlerException, so that the dead-letter queue says
// whose fault it was.
func (in *Inbox) handlerError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errorhandling.ReasonOf(err); ok {
		return err
	}
	if in.cfg.Relay.Classifier.Classify(err).Class != errorhandling.ClassUnknown {
		return err
	}
	return errorhandling.WithReason(err, errorhandling.ReasonHandlerException)
}

// storeFault is a failure of the inbox's own database work: transient and
// charged to the destination, so the message keeps its attempts.
func storeFault(err error) error {
	return errorhandling.WithBlame(errorhandling.Transient(err), errorhandling.BlameDestination)
}
