package inbox

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/backstophq/backstop/store"
)

// TestFullDiskInsideTheHandlerKeepsTheAttempts: a transactional handler's
// write fails because the SQLite database is full (SQLITE_FULL: the disk,
// or max_page_count, which stands in for it here), and there is room again
// a moment later. That is the database's fault, not the message's, as a
// PostgreSQL connection lost inside the handler is
// (TestConnectionLostInsideTheHandlerKeepsTheAttempts). Before, each such
// failure was charged to the message as a HandlerException: three brief
// full disks dead-lettered a good message as poison.
func TestFullDiskInsideTheHandlerKeepsTheAttempts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, kinds[0]) // SQLite
	in := e.newInbox(e.config())
	big := strings.Repeat("x", 64<<10)
	var calls callLog
	in.Handle("order.created", func(ctx context.Context, tx store.Tx, msg *Message) error {
		calls.add(msg)
		if calls.len() > 3 {
			return e.record(ctx, tx, msg)
		}
		// The disk fills up while the handler writes, and has room again
		// once the handler has failed.
		var pages int64
		if err := tx.QueryRow(ctx, `PRAGMA page_count`).Scan(&pages); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf(`PRAGMA max_page_count = %d`, pages)); err != nil {
			return err
		}
		defer tx.Exec(context.WithoutCancel(ctx), `PRAGMA max_page_count = 1073741823`)
		_, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (source_id, stream, attempt) VALUES ('%s', '%s', %d)`,
			e.table, big, msg.Stream, msg.Attempt))
		if err == nil {
			return fmt.Errorf("a 64 KB row went into a database with no page free")
		}
		return fmt.Errorf("record the order: %w", err)
	})
	e.receive(in, received("m-1", "order.created", "o-1"))
	e.run(in)
	e.waitFor("m-1 handled or dead-lettered", func() bool {
		s := in.Relay().Stats()
		return s.Delivered == 1 || s.DeadLettered == 1
	})
	if got := e.handled(); !slices.Equal(got["o-1"], []string{"m-1@1"}) {
		t.Fatalf("committed %v after three full disks (calls %s), want m-1 on its first attempt: "+
			"a full database is not the message's failure", got, calls.String())
	}
	if n := in.Relay().Stats().DeadLettered; n != 0 {
		t.Fatalf("%d dead letters, want none", n)
	}
}
