package inbox

import (
	"context"
	"fmt"
	"testing"

	"github.com/backstophq/backstop/store"
)

// TestHandlerOwnCancellationUsesUpAttempts: a handler that returns
// context.Canceled of its own making (a call it cancelled itself, a
// context it derived and cancelled), while the inbox's attempt still runs,
// failed the same way on every try. The classifier took the cancellation
// for the relay's shutdown and blamed the destination: the message was
// charged nothing, released again and again, and held its stream for
// ever. Now it is the handler's failure (HandlerException): charged, and
// dead-lettered when its attempts run out.
func TestHandlerOwnCancellationUsesUpAttempts(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, k kind) {
		e := newEnv(t, k)
		in := e.newInbox(e.config())
		var calls callLog
		in.Handle("order.created", func(ctx context.Context, tx store.Tx, msg *Message) error {
			calls.add(msg)
			call, cancel := context.WithCancel(ctx)
			cancel()
			return fmt.Errorf("ask the inventory service: %w", call.Err())
		})
		e.receive(in, received("m-1", "order.created", "o-1"))
		e.run(in)
		e.waitFor("m-1 dead-lettered, or tried past its attempts", func() bool {
			return in.Relay().Stats().DeadLettered == 1 || calls.len() > testPolicy.MaxAttempts
		})
		if c := calls.String(); c != "m-1@1 m-1@2 m-1@3" {
			t.Fatalf("calls %s, want m-1 charged on each of its three attempts and dead-lettered", c)
		}
		entries, err := e.s.DLQ().List(e.ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 || entries[0].Attempts != testPolicy.MaxAttempts {
			t.Fatalf("dead letters %+v, want m-1's after %d attempts", entries, testPolicy.MaxAttempts)
		}
	})
}
