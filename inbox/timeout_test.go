package inbox

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/store"
)

// TestHandlerTimeoutUsesUpAttempts: a handler that never finishes on one
// message (a lock wait, a runaway parse) runs out of the attempt's time
// on every try. That is the message's fault: each try is charged, and the
// message is dead-lettered when its attempts run out. It used to be
// blamed on the destination (a deadline is a webhook's outage), charged
// nothing and released for ever, holding its stream. Both handler kinds:
// one that returns the context's error, and a transactional one that
// ignores its context and returns nil late (its completion then fails).
func TestHandlerTimeoutUsesUpAttempts(t *testing.T) {
	t.Parallel()
	for _, ignores := range []bool{false, true} {
		name := "returns ctx.Err"
		if ignores {
			name = "returns nil late"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			forEachStore(t, func(t *testing.T, k kind) {
				e := newEnv(t, k)
				cfg := e.config()
				cfg.Handling.Timeout = time.Minute
				in := e.newInbox(cfg)
				var calls atomic.Int64
				done := make(chan struct{})
				in.Handle("order.created", func(ctx context.Context, tx store.Tx, msg *Message) error {
					if msg.ID != "hang" {
						return e.record(ctx, tx, msg)
					}
					calls.Add(1)
					select {
					case <-ctx.Done():
					case <-done: // the test's end: shutdown runs on the fake clock
					}
					if ignores {
						return nil
					}
					return ctx.Err()
				})
				e.receive(in, received("hang", "order.created", "a"))
				e.receive(in, received("other", "order.created", "b"))
				e.run(in)
				t.Cleanup(func() { close(done) })
				e.waitFor("the hanging message dead-lettered", func() bool { return in.Relay().Stats().DeadLettered == 1 })
				entries, err := e.s.DLQ().List(e.ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				if len(entries) != 1 || entries[0].Attempts != testPolicy.MaxAttempts ||
					entries[0].Reason != errorhandling.ReasonPoisonMessage || entries[0].Headers[HeaderID] != "hang" {
					t.Fatalf("dead letters %+v; want the hanging message's, after %d attempts", entries, testPolicy.MaxAttempts)
				}
				if n := calls.Load(); n != int64(testPolicy.MaxAttempts) {
					t.Errorf("the handler ran %d times on the hanging message, want %d", n, testPolicy.MaxAttempts)
				}
				if !ignores && !strings.Contains(entries[0].ErrorMessage, "deadline exceeded") {
					t.Errorf("dead letter error %q, want the deadline", entries[0].ErrorMessage)
				}
				e.waitFor("the other stream's message handled", func() bool { return len(e.handled()["b"]) == 1 })
			})
		})
	}
}
