package inbox

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/backstophq/backstop/store"
)

// TestHandlerThatSwallowsAFailedStatement: on PostgreSQL a statement that
// fails aborts the whole transaction, and a handler that ignores the
// error (an "insert, already there is fine" written for another
// database) and returns nil leaves the completion to fail with "current
// transaction is aborted". That failure was taken for the database's
// (transient, blamed on the destination): the message was never charged,
// was handled again for ever and tripped the inbox's breaker, which held
// every stream of the inbox. It is the handler's fault: each try is
// charged, and the message is dead-lettered when its attempts run out.
func TestHandlerThatSwallowsAFailedStatement(t *testing.T) {
	t.Parallel()
	e := newEnv(t, kinds[1])
	in := e.newInbox(e.config())
	var calls atomic.Int64
	in.Handle("order.created", func(ctx context.Context, tx store.Tx, msg *Message) error {
		if msg.ID == "swallows" {
			calls.Add(1)
			_, _ = tx.Exec(ctx, `SELECT 1/0`) // the error ignored
			return nil
		}
		return e.record(ctx, tx, msg)
	})
	e.receive(in, received("swallows", "order.created", "a"))
	e.receive(in, received("other", "order.created", "b"))
	e.run(in)
	limit := int64(testPolicy.MaxAttempts) + 5
	e.waitFor("the message dead-lettered (or handled too often)", func() bool {
		return in.Relay().Stats().DeadLettered == 1 || calls.Load() > limit
	})
	if n := calls.Load(); n != int64(testPolicy.MaxAttempts) {
		t.Fatalf("the handler ran %d times, want %d (its attempts), then the message dead-lettered; stats %+v",
			n, testPolicy.MaxAttempts, in.Relay().Stats())
	}
	entries, err := e.s.DLQ().List(e.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Headers[HeaderID] != "swallows" || !strings.Contains(entries[0].ErrorMessage, "aborted") {
		t.Fatalf("dead letters %+v, want the swallowing message's, saying its transaction was aborted", entries)
	}
	e.waitFor("the other stream's message handled", func() bool { return len(e.handled()["b"]) == 1 })
}
