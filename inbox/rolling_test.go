package inbox

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/store"
)

// TestTypeOnlyTheNewVersionKnowsWaitsForIt: during a rolling deploy an
// instance of the old version, with no handler for a type only the new
// version handles, claims a message of that type. It gives the message
// back, uncharged, instead of dead-lettering it, and an instance of the
// new version handles it at its first attempt.
func TestTypeOnlyTheNewVersionKnowsWaitsForIt(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, k kind) {
		e := newEnv(t, k)
		old := e.newInbox(e.config())
		old.Handle("order.placed", func(ctx context.Context, tx store.Tx, msg *Message) error { return e.record(ctx, tx, msg) })
		e.receive(old, received("m-1", "order.refunded", "o-1"))
		rn := e.run(old)
		e.waitFor("the old instance's attempt", func() bool {
			s := old.Relay().Stats()
			return s.Released+s.DeadLettered+s.Failed > 0
		})
		if err := rn.shutdown(); err != nil {
			t.Fatal(err)
		}
		s := old.Relay().Stats()
		if s.DeadLettered != 0 || s.Failed != 0 {
			t.Fatalf("the old instance dead-lettered %d, failed %d; want the message given back, uncharged", s.DeadLettered, s.Failed)
		}
		if n := counter(t, e.reg, "backstop_inbox_no_handler_total", "inbox", "orders"); n < 1 {
			t.Errorf("backstop_inbox_no_handler_total = %d, want at least 1", n)
		}

		cfg := e.config()
		cfg.Metrics = nil
		upgraded := e.newInbox(cfg)
		upgraded.Handle("order.placed", func(ctx context.Context, tx store.Tx, msg *Message) error { return e.record(ctx, tx, msg) })
		upgraded.Handle("order.refunded", func(ctx context.Context, tx store.Tx, msg *Message) error { return e.record(ctx, tx, msg) })
		e.run(upgraded)
		e.waitFor("the new instance handles it", func() bool { return e.count(`SELECT count(*) FROM `+e.table) == 1 })
		if h := e.handled(); strings.Join(h["o-1"], " ") != "m-1@1" {
			t.Errorf("handled %v, want m-1 at its first attempt", h)
		}
	})
}

// TestTypeNobodyHandlesIsDeadLetteredAfterNoHandlerWait: a message of a
// type no instance comes to handle is given back until it has waited
// Config.NoHandlerWait, then dead-lettered with a reason naming its type.
func TestTypeNobodyHandlesIsDeadLetteredAfterNoHandlerWait(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, k kind) {
		e := newEnv(t, k)
		cfg := e.config()
		cfg.NoHandlerWait = 10 * time.Minute
		in := e.newInbox(cfg)
		e.receive(in, received("m-1", "order.refunded", "o-1"))
		start := e.clk.Now()
		e.run(in)
		e.waitFor("the dead letter", func() bool { return in.Relay().Stats().DeadLettered == 1 })
		if waited := e.clk.Now().Sub(start); waited < cfg.NoHandlerWait {
			t.Errorf("dead-lettered after %v, want at least NoHandlerWait (%v)", waited, cfg.NoHandlerWait)
		}
		entries, err := e.s.DLQ().List(e.ctx, nil)
		if err != nil || len(entries) != 1 {
			t.Fatalf("List = %d entries, %v; want 1", len(entries), err)
		}
		if d := entries[0]; d.Reason != errorhandling.ReasonValidationFailure || d.Attempts != 1 ||
			!strings.Contains(d.ErrorMessage, `no handler for message type "order.refunded"`) {
			t.Errorf("dead letter reason %v, attempts %d, error %q; want ValidationFailure after 1 attempt, naming the type",
				d.Reason, d.Attempts, d.ErrorMessage)
		}
	})
}
