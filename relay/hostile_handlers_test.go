package relay

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
)

// probeOne runs one message with the handler fn next to a healthy one on
// another stream, and returns the hostile message as stored after settling.
func probeOne(t *testing.T, fn func(ctx context.Context, m *outbox.Message) error) (*env, *outbox.Message, *outbox.Message) {
	e := newEnv(t)
	bad, good := msg("api", "a", 1), msg("api", "b", 2)
	e.enqueue(bad, good)
	badID := bad.ID
	rec := &recorder{fn: func(ctx context.Context, m *outbox.Message, _ int) error {
		if m.ID == badID {
			return fn(ctx, m)
		}
		return nil
	}}
	rn := e.start(e.config(map[string]Destination{"api": {Transport: rec.transport()}}))
	rn.settle()
	return e, e.get(badID), e.get(good.ID)
}

func TestHandlerPanicsNil(t *testing.T) {
	t.Parallel()
	_, got, good := probeOne(t, func(context.Context, *outbox.Message) error { panic(nil) })
	if got == nil || got.DeadLetteredAt.IsZero() || got.FailureReason != errorhandling.ReasonHandlerException {
		t.Fatalf("after panic(nil): %+v", got)
	}
	if good != nil {
		t.Fatal("other not delivered")
	}
}

func TestHandlerPanicsNonError(t *testing.T) {
	t.Parallel()
	_, got, _ := probeOne(t, func(context.Context, *outbox.Message) error { panic(struct{ A []int }{A: []int{1}}) })
	if got == nil || got.DeadLetteredAt.IsZero() || got.FailureReason != errorhandling.ReasonHandlerException {
		t.Fatalf("after panic(struct): %+v", got)
	}
}

func TestHandlerHugeError(t *testing.T) {
	t.Parallel()
	e, got, _ := probeOne(t, func(context.Context, *outbox.Message) error {
		return errorhandling.Permanent(errors.New(strings.Repeat("x", 10<<20)))
	})
	if got == nil || got.DeadLetteredAt.IsZero() {
		t.Fatalf("huge error: %+v", got)
	}
	t.Logf("LastError len %d", len(got.Error))
	dl := e.deadLetters()
	if len(dl) != 1 {
		t.Fatalf("dlq: %d", len(dl))
	}
	t.Logf("dlq error len %d", len(dl[0].ErrorMessage))
}
