package inbox

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop/store"
)

// TestHandlerPastTheServersIdleTransactionTimeout: a transactional handler
// that spends longer on one message than the server lets a transaction
// sit idle (idle_in_transaction_session_timeout, set by a DBA) has its
// session ended by PostgreSQL on every try, and its completion fails with
// 25P03. That was taken for a lost database (transient, blamed on the
// destination): never charged, the message was handled again for ever
// (9 tries of 3 allowed when measured) and tripped the inbox's breaker,
// holding every stream. It is the handler's fault, as running past the
// attempt's Timeout is: each try is charged.
func TestHandlerPastTheServersIdleTransactionTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, kinds[1])
	in := e.newInbox(e.config())
	var calls atomic.Int64
	in.Handle("order.created", func(ctx context.Context, tx store.Tx, msg *Message) error {
		if msg.ID != "slow" {
			return e.record(ctx, tx, msg)
		}
		calls.Add(1)
		if _, err := tx.Exec(ctx, `SET LOCAL idle_in_transaction_session_timeout = '100ms'`); err != nil {
			return err
		}
		var pid int
		if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			return err
		}
		// The handler's slow call: it returns once the server has ended
		// the idle session.
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for e.count(fmt.Sprintf(`SELECT count(*) FROM pg_stat_activity WHERE pid = %d`, pid)) > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-tick.C:
			}
		}
		return nil
	})
	e.receive(in, received("slow", "order.created", "a"))
	e.receive(in, received("other", "order.created", "b"))
	e.run(in)
	limit := int64(testPolicy.MaxAttempts) + 5
	e.waitFor("the slow message dead-lettered (or handled too often)", func() bool {
		return in.Relay().Stats().DeadLettered == 1 || calls.Load() > limit
	})
	if n := calls.Load(); n != int64(testPolicy.MaxAttempts) {
		t.Fatalf("the handler ran %d times, want %d; stats %+v", n, testPolicy.MaxAttempts, in.Relay().Stats())
	}
	e.waitFor("the other stream's message handled", func() bool { return len(e.handled()["b"]) == 1 })
}
