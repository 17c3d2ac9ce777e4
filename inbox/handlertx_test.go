package inbox

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/backstophq/backstop/store"
)

// TestHandlerThatEndsItsTransaction: a transactional handler that ends its
// transaction itself, out of the habit of "defer tx.Rollback(); ...;
// return tx.Commit()", had its effects committed without the message's
// completion. The inbox's completion then failed on the ended
// transaction, which was taken for a fault of the inbox's database: the
// message was not charged and ran again and again, committing its effects
// each time. Now the handler's Commit is refused (ErrTxManaged): a handler
// that returns nil anyway has its effects committed once, with the
// completion; one that returns the refusal, or rolls back and returns
// nil, fails its attempts, which are charged, and is dead-lettered with
// nothing committed.
func TestHandlerThatEndsItsTransaction(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		handle  func(ctx context.Context, tx store.Tx) error
		handled int    // rows committed
		dead    string // the dead letter's error holds it; "" means delivered
	}{
		{name: "commits and returns nil", handled: 1, handle: func(ctx context.Context, tx store.Tx) error {
			if err := tx.Commit(ctx); !errors.Is(err, ErrTxManaged) {
				return errors.New("the handler's own Commit was not refused")
			}
			return nil
		}},
		{name: "returns its commit", dead: "do not commit it", handle: func(ctx context.Context, tx store.Tx) error {
			defer func() { _ = tx.Rollback(ctx) }()
			return tx.Commit(ctx)
		}},
		{name: "rolls back and returns nil", dead: "rolled back its transaction", handle: func(ctx context.Context, tx store.Tx) error {
			return tx.Rollback(ctx)
		}},
	}
	forEachStore(t, func(t *testing.T, k kind) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				e := newEnv(t, k)
				in := e.newInbox(e.config())
				var calls callLog
				in.Handle("order.created", func(ctx context.Context, tx store.Tx, msg *Message) error {
					calls.add(msg)
					if err := e.record(ctx, tx, msg); err != nil {
						return err
					}
					return c.handle(ctx, tx)
				})
				e.receive(in, received("m-1", "order.created", "o-1"))
				e.run(in)
				e.waitFor("m-1 delivered or dead-lettered, or handled past its attempts", func() bool {
					s := in.Relay().Stats()
					return s.Delivered == 1 || s.DeadLettered == 1 || calls.len() > testPolicy.MaxAttempts
				})
				if got := e.handled(); len(got["o-1"]) != c.handled {
					t.Fatalf("committed %v (calls %s), want %d rows", got, calls.String(), c.handled)
				}
				s := in.Relay().Stats()
				if c.dead == "" {
					if s.Delivered != 1 || calls.len() != 1 {
						t.Fatalf("relay stats %+v, calls %s: want m-1 delivered on its first attempt", s, calls.String())
					}
					return
				}
				if s.DeadLettered != 1 || calls.String() != "m-1@1 m-1@2 m-1@3" {
					t.Fatalf("relay stats %+v, calls %s: want m-1 dead-lettered after its three attempts", s, calls.String())
				}
				entries, err := e.s.DLQ().List(e.ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				if len(entries) != 1 || !strings.Contains(entries[0].ErrorMessage, c.dead) {
					t.Fatalf("dead letters %+v, want one whose error says %q", entries, c.dead)
				}
			})
		}
	})
}
