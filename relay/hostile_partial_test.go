package relay

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
)

// A handler that reports StatusPublished as a completed step of a failed
// delivery ("published to the bus, then failed") must not leave the
// message neither delivered nor retried nor dead-lettered, nor let the
// later messages of its strict stream go past it.
func TestPartialWithPublishedFlag(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	first, second := msg("orders", "s", 1), msg("orders", "s", 2)
	e.enqueue(first, second)
	rec := &recorder{fn: func(_ context.Context, m *outbox.Message, call int) error {
		if call == 1 {
			err := errorhandling.WithBlame(errorhandling.Transient(errors.New("audit write failed")), errorhandling.BlameMessage)
			return Completed(err, outbox.StatusPublished)
		}
		return nil
	}}
	rn := e.start(e.config(map[string]Destination{"orders": {Transport: rec.transport()}}))
	rn.settle()
	rn.advance(time.Minute)
	rn.advance(time.Minute)
	calls := rec.got()
	if len(calls) < 2 || calls[1] != string(first.Payload) {
		t.Errorf("the failed message was not retried before its stream went on: calls %q, first %+v", calls, e.get(first.ID))
	}
	if got := e.get(first.ID); got != nil {
		t.Errorf("first message still stored after retries: %+v", got)
	}
}
