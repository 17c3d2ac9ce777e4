package inbox

import (
	"context"
	"strings"
	"testing"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/store"
)

// selfWrapping is an error whose Unwrap returns itself: errors.Is and
// errors.As walk it for ever.
type selfWrapping struct{}

func (e *selfWrapping) Error() string { return "refused by the ledger" }
func (e *selfWrapping) Unwrap() error { return e }

// A handler's error whose Unwrap chain never ends is dead-lettered at
// once, reason HandlerException, and the inbox goes on with the other
// messages (another stream's: a strict stream waits behind its dead
// letter). Before, the inbox walked the error (errors.Is) before the
// relay's guard saw it: the worker spun on a core for good, the message's
// lease renewed, its stream held, and the instance that claimed it next
// stuck the same way.
func TestHandlerErrorWithAnEndlessChainIsDeadLettered(t *testing.T) {
	t.Parallel()
	for _, tx := range []bool{false, true} {
		name := "HandleFunc"
		if tx {
			name = "Handle"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			forEachStore(t, func(t *testing.T, k kind) {
				e := newEnv(t, k)
				in := e.newInbox(e.config())
				var calls callLog
				fn := func(msg *Message) error {
					calls.add(msg)
					if msg.ID == "m-1" {
						return &selfWrapping{}
					}
					return nil
				}
				if tx {
					in.Handle("order.created", func(_ context.Context, _ store.Tx, msg *Message) error { return fn(msg) })
				} else {
					in.HandleFunc("order.created", func(_ context.Context, msg *Message) error { return fn(msg) })
				}
				e.receive(in, received("m-1", "order.created", "o-1"))
				e.receive(in, received("m-2", "order.created", "o-2"))
				e.run(in)
				e.waitFor("m-1 dead-lettered and m-2 handled", func() bool {
					return in.Relay().Stats().DeadLettered == 1 && calls.len() == 2
				})
				if c := calls.String(); c != "m-1@1 m-2@1" && c != "m-2@1 m-1@1" {
					t.Fatalf("calls %s, want m-1 once, dead-lettered, and m-2 once", c)
				}
				entries, err := e.s.DLQ().List(e.ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				if len(entries) != 1 || entries[0].Reason != errorhandling.ReasonHandlerException ||
					!strings.Contains(entries[0].ErrorMessage, "Unwrap chain that does not end: refused by the ledger") {
					t.Fatalf("dead letters %+v, want m-1's with reason HandlerException naming the endless chain", entries)
				}
			})
		})
	}
}
