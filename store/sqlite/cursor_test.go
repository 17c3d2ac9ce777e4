package sqlite

import (
	"context"
	"testing"

	"github.com/backstophq/backstop/store"
)

// TestInboxCursorWrittenByHand: a cursor row another program wrote with a
// value that is no position (text, a real, a negative number: SQLite
// keeps what it is given) reads as no cursor, so that the receiver starts
// from its replay instead of failing to start, or starting at a position
// the value was never meant to be.
func TestInboxCursorWrittenByHand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := openTemp(t, store.Config{})
	for _, v := range []any{"12abc", 3.5, -4, []byte{0xff}} {
		if _, err := s.DB().ExecContext(ctx, `INSERT OR REPLACE INTO backstop_inbox_cursors (inbox, source, next, updated_at)
			VALUES ('orders', 'rabbitmq:q', ?, 0)`, v); err != nil {
			// The CHECK refuses a negative number; that is as good.
			t.Logf("%v: refused: %v", v, err)
			continue
		}
		next, ok, err := s.InboxCursor(ctx, "orders", "rabbitmq:q")
		if err != nil || ok {
			t.Errorf("next written as %#v: InboxCursor = %d, %v, %v; want no cursor and no error", v, next, ok, err)
		}
	}
	if err := s.SaveInboxCursor(ctx, "orders", "rabbitmq:q", 9); err != nil {
		t.Fatal(err)
	}
	if next, ok, err := s.InboxCursor(ctx, "orders", "rabbitmq:q"); err != nil || !ok || next != 9 {
		t.Errorf("saved over it: InboxCursor = %d, %v, %v; want 9", next, ok, err)
	}
}
