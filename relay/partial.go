package relay

import (
	"errors"

	"github.com/backstophq/backstop/outbox"
)

// PartialError is a delivery error that says which steps completed before
// the failure (seed 000's CompletedStatus). The relay records the steps on
// the message (flags are OR-ed in, never removed), so the next attempt
// sees them in m.Status and can skip what is done. Its message and
// classification are those of Err. StatusPublished among them is ignored:
// only a delivery that succeeds publishes a message.
type PartialError struct {
	// Completed are the status flags of the steps that completed, such as
	// outbox.StatusEventStored.
	Completed outbox.Status
	// Err is the failure of the step that did not.
	Err error
}

// Completed wraps err to say that steps completed before it. It returns nil
// for a nil err: a delivery that succeeded completed everything.
//
//	if !m.Status.Has(outbox.StatusEventStored) {
//		if err := storeEvent(ctx, m); err != nil {
//			return err
//		}
//	}
//	if err := publish(ctx, m); err != nil {
//		return relay.Completed(err, outbox.StatusEventStored)
//	}
func Completed(err error, steps outbox.Status) error {
	if err == nil {
		return nil
	}
	return &PartialError{Completed: steps, Err: err}
}

// Error returns Err's message.
func (e *PartialError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *PartialError) Unwrap() error { return e.Err }

// CompletedSteps returns the status flags that every PartialError in err's
// chain reports as completed, OR-ed together; zero when there are none.
func CompletedSteps(err error) outbox.Status {
	var s outbox.Status
	for err != nil {
		var p *PartialError
		if !errors.As(err, &p) {
			break
		}
		s |= p.Completed
		err = p.Err
	}
	return s
}
