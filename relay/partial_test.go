package relay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/retry"
)

// twoSteps is a handler of two steps: it stores an event, then publishes.
// Publishing fails failures times; a retry skips the stored step.
type twoSteps struct {
	stored, published, failures int
}

func (h *twoSteps) deliver(_ context.Context, m *outbox.Message, _ int) error {
	if !m.Status.Has(outbox.StatusEventStored) {
		h.stored++
	}
	h.published++
	if h.published <= h.failures {
		err := errorhandling.WithBlame(errorhandling.Transient(errors.New("publish failed")), errorhandling.BlameMessage)
		return Completed(err, outbox.StatusEventStored)
	}
	return nil
}

func TestPartialCompletionResumesAcrossAttempts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := msg("orders", "s", 1)
	e.enqueue(m)
	h := &twoSteps{failures: 1}
	rn := e.start(e.config(map[string]Destination{"orders": {Transport: (&recorder{fn: h.deliver}).transport()}}))
	rn.settle()
	got := e.get(m.ID)
	if got == nil || !got.Status.Has(outbox.StatusEventStored|outbox.StatusFailed) || got.Attempts != 1 {
		t.Fatalf("after the failure: %+v", got)
	}
	rn.advance(time.Minute)
	if e.get(m.ID) != nil || h.stored != 1 || h.published != 2 {
		t.Fatalf("stored %d times, published %d times", h.stored, h.published)
	}
}

func TestPartialCompletionResumesInProcess(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := msg("orders", "s", 1)
	e.enqueue(m)
	h := &twoSteps{failures: 2}
	rn := e.start(e.config(map[string]Destination{"orders": {
		Transport: (&recorder{fn: h.deliver}).transport(),
		InProcess: retry.NewConfig(3, retry.NewFixedDelay(0, false)),
	}}))
	rn.settle()
	if e.get(m.ID) != nil || h.stored != 1 || h.published != 3 {
		t.Fatalf("stored %d times, published %d times", h.stored, h.published)
	}
}

func TestCompletedSteps(t *testing.T) {
	t.Parallel()
	if Completed(nil, outbox.StatusEventStored) != nil {
		t.Fatal("Completed(nil) != nil")
	}
	base := errors.New("boom")
	err := fmt.Errorf("outer: %w", Completed(Completed(base, outbox.StatusStored), outbox.StatusEventStored))
	if got := CompletedSteps(err); got != outbox.StatusStored|outbox.StatusEventStored {
		t.Fatalf("CompletedSteps = %v", got)
	}
	if !errors.Is(err, base) || err.Error() != "outer: boom" {
		t.Fatalf("wrapping changed the error: %v", err)
	}
	if CompletedSteps(base) != 0 {
		t.Fatal("steps from a plain error")
	}
}

func TestTransportPanicDeadLettersTheMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	bad, good := msg("orders", "a", 1), msg("orders", "b", 1)
	e.enqueue(bad, good)
	rec := &recorder{fn: func(_ context.Context, m *outbox.Message, _ int) error {
		if string(m.Payload) == string(bad.Payload) {
			panic("nil map")
		}
		return nil
	}}
	rn := e.start(e.config(map[string]Destination{"orders": {Transport: rec.transport()}}))
	rn.settle()
	dl := e.deadLetters()
	if len(dl) != 1 || dl[0].MessageID != bad.ID.String() || dl[0].Reason != errorhandling.ReasonHandlerException ||
		dl[0].ErrorMessage != "transport panicked: nil map" {
		t.Fatalf("dead letters = %+v", dl)
	}
	if e.get(good.ID) != nil {
		t.Fatal("a panic stopped the other deliveries")
	}
	if logs := e.logs.find("transport panicked"); len(logs) != 1 || !strings.Contains(logs[0].attrs["stack"], "safeDeliver") {
		t.Fatalf("operations log = %+v", logs)
	}
}
