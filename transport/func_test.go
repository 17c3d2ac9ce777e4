package transport_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/transport"
	"github.com/backstophq/backstop/transport/transporttest"
)

// recordingFunc is a Go-handler transport that records what it is handed,
// dropping ids it has seen when dedup is set.
func recordingFunc(rec *transporttest.Recorder, dedup bool) transport.Func {
	var mu sync.Mutex
	seen := map[string]bool{}
	return func(ctx context.Context, m *outbox.Message) error {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("handler: %w", err)
		}
		if dedup {
			mu.Lock()
			dup := seen[m.ID.String()]
			seen[m.ID.String()] = true
			mu.Unlock()
			if dup {
				return nil
			}
		}
		rec.Record(transporttest.FromMessage(m))
		return nil
	}
}

func TestFuncConformance(t *testing.T) {
	transporttest.Run(t, transporttest.Harness{
		New: func(t *testing.T) (transport.Transport, transporttest.Receiver) {
			rec := transporttest.NewRecorder()
			return recordingFunc(rec, false), rec
		},
		Features: transporttest.Features{Headers: true, Ordered: true},
	})
}

func TestFuncConformanceDedup(t *testing.T) {
	transporttest.Run(t, transporttest.Harness{
		New: func(t *testing.T) (transport.Transport, transporttest.Receiver) {
			rec := transporttest.NewRecorder()
			return recordingFunc(rec, true), rec
		},
		Features: transporttest.Features{Dedup: true, Headers: true, Ordered: true},
	})
}

func TestFuncPassesErrorsThrough(t *testing.T) {
	boom := errorhandling.Permanent(errors.New("bad order"))
	var got *outbox.Message
	f := transport.Func(func(_ context.Context, m *outbox.Message) error {
		got = m
		return boom
	})
	m := &outbox.Message{Type: "t"}
	if err := f.Deliver(context.Background(), m); err != boom {
		t.Fatalf("Deliver = %v, want the handler's error as is", err)
	}
	if got != m {
		t.Fatal("handler did not receive the message")
	}
	if !errorhandling.IsPermanent(f.Deliver(context.Background(), m)) {
		t.Fatal("the Permanent marker was lost")
	}
	if err := f.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
}

func TestAttempt(t *testing.T) {
	for _, c := range []struct{ attempts, want int }{{0, 1}, {1, 2}, {9, 10}} {
		if got := transport.Attempt(&outbox.Message{Attempts: c.attempts}); got != c.want {
			t.Errorf("Attempt(Attempts=%d) = %d, want %d", c.attempts, got, c.want)
		}
	}
}
