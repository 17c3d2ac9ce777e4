package inbox

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/store"
)

// TestConnectionLostInsideTheHandlerKeepsTheAttempts: a transactional
// handler whose connection to PostgreSQL is lost while it works (a
// restart, a failover: here its backend is terminated) fails, and that is
// the database's fault, not the message's. It was counted as a failed
// attempt (HandlerException), so three such outages dead-lettered a good
// message as poison; now the message keeps its attempts and is handled
// once the database answers.
func TestConnectionLostInsideTheHandlerKeepsTheAttempts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, kinds[1]) // PostgreSQL
	admin, err := pgx.Connect(e.ctx, testenv.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	in := e.newInbox(e.config())
	var calls callLog
	in.Handle("order.created", func(ctx context.Context, tx store.Tx, msg *Message) error {
		calls.add(msg)
		if calls.len() > 3 {
			return e.record(ctx, tx, msg)
		}
		var pid int
		if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			return err
		}
		var gone bool
		if err := admin.QueryRow(ctx, `SELECT pg_terminate_backend($1, 30000)`, pid).Scan(&gone); err != nil || !gone {
			return fmt.Errorf("terminate backend %d: %v, %v", pid, gone, err)
		}
		// The first statement after it fails with the server's FATAL
		// (57P01); those after it with pgx's "conn closed", which is what
		// a handler that goes on, or that meets a cut it did not see
		// coming, returns.
		_ = e.record(ctx, tx, msg)
		return e.record(ctx, tx, msg)
	})
	e.receive(in, received("m-1", "order.created", "o-1"))
	e.run(in)
	e.waitFor("m-1 handled or dead-lettered", func() bool {
		s := in.Relay().Stats()
		return s.Delivered == 1 || s.DeadLettered == 1
	})
	if got := e.handled(); !slices.Equal(got["o-1"], []string{"m-1@1"}) {
		t.Fatalf("committed %v after three lost connections (calls %s), want m-1 on its first attempt: "+
			"a lost connection is not the message's failure", got, calls.String())
	}
	if n := in.Relay().Stats().DeadLettered; n != 0 {
		t.Fatalf("%d dead letters, want none", n)
	}
}
