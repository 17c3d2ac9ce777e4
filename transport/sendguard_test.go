package transport_test

import (
	"context"
	"errors"
	"testing"

	"github.com/backstophq/backstop/transport"
)

// CheckSend passes without a guard and with a guard that passes, and
// otherwise returns the guard's error or the context's, matching
// ErrNotSent; a context already done is not asked of the guard.
func TestCheckSend(t *testing.T) {
	errGuard := errors.New("lease lapsed")
	if err := transport.CheckSend(context.Background()); err != nil {
		t.Errorf("no guard: %v", err)
	}
	asked := 0
	pass := transport.WithSendGuard(context.Background(), func() error { asked++; return nil })
	if err := transport.CheckSend(pass); err != nil || asked != 1 {
		t.Errorf("a guard that passes: %v, asked %d times", err, asked)
	}
	fail := transport.WithSendGuard(context.Background(), func() error { return errGuard })
	if err := transport.CheckSend(fail); !errors.Is(err, errGuard) || !errors.Is(err, transport.ErrNotSent) {
		t.Errorf("a guard that fails: %v, want its error and ErrNotSent", err)
	}
	ctx, cancel := context.WithCancel(pass)
	cancel()
	asked = 0
	if err := transport.CheckSend(ctx); !errors.Is(err, context.Canceled) || !errors.Is(err, transport.ErrNotSent) || asked != 0 {
		t.Errorf("a context done: %v (guard asked %d times), want context.Canceled and ErrNotSent, the guard not asked", err, asked)
	}
}
