package inbox

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/backstophq/backstop/store"
)

// TestSweepKeepsTheRecordOfAPendingMessage: the sweep deletes a message
// id's de-duplication record once it is older than DedupWindow, whether
// or not the message it stands for was handled. A message still waiting
// (retried on its policy's schedule, or behind a blocked strict stream)
// and delivered again by its source is then stored a second time, and
// handled twice (here the copy first). Not fixed: the record does not
// name the row it stands for (a design change).
func TestSweepKeepsTheRecordOfAPendingMessage(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, k kind) {
		e := newEnv(t, k)
		cfg := e.config()
		cfg.DedupWindow = time.Minute
		cfg.SweepInterval = -1
		in := e.newInbox(cfg)
		release := make(chan struct{})
		in.Handle("order.created", func(ctx context.Context, tx store.Tx, msg *Message) error {
			select {
			case <-release:
				return e.record(ctx, tx, msg)
			default:
				return errors.New("downstream not ready")
			}
		})
		e.receive(in, received("m1", "order.created", "a"))
		e.run(in)
		e.waitFor("the first attempt failed", func() bool { return in.Relay().Stats().Failed >= 1 })
		e.clk.Advance(2 * time.Minute) // past the window; the row is still waiting for its retry
		if _, err := in.Sweep(e.ctx); err != nil {
			t.Fatal(err)
		}
		if dup := e.receive(in, received("m1", "order.created", "a")); !dup {
			t.Errorf("m1, delivered again while its row waits, was stored a second time")
		}
		close(release)
		e.waitFor("no inbox rows left", func() bool {
			return e.count(`SELECT count(*) FROM `+k.outbox(e.spec)+` WHERE destination = 'inbox:orders'`) == 0
		})
		if got := e.handled()["a"]; len(got) != 1 {
			t.Errorf("m1 handled %v, want once", got)
		}
	})
}
