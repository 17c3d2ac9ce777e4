package inbox

import (
	"errors"
	"strings"
	"testing"
)

// TestIDReusedWithAnotherContentIsRefusedAndKept: a source sends a second
// message under the id of one already received, with another payload. It
// is not the same message: it is refused (ErrIDReused, which matches
// ErrInvalid, so receivers refuse it), kept as a dead letter of the inbox
// naming the row the id was first stored as, and counted, not dropped as
// a duplicate. The first message sent again is still a duplicate.
func TestIDReusedWithAnotherContentIsRefusedAndKept(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, k kind) {
		e := newEnv(t, k)
		in := e.newInbox(e.config())
		first := received("m-1", "order.placed", "o-1")
		if e.receive(in, first) {
			t.Fatal("the first message is a duplicate")
		}
		other := first
		other.Payload = []byte(`{"id":"m-1","amount":1000000}`)
		for i := range 2 {
			dup, err := in.Receive(e.ctx, other)
			if dup || !errors.Is(err, ErrIDReused) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("Receive %d of another payload under id m-1 = duplicate %v, %v; want ErrIDReused", i+1, dup, err)
			}
		}
		if !e.receive(in, first) {
			t.Error("the first message sent again is not a duplicate")
		}
		if n := counter(t, e.reg, "backstop_inbox_reused_ids_total", "inbox", "orders", "source", "test"); n != 2 {
			t.Errorf("backstop_inbox_reused_ids_total = %d, want 2", n)
		}
		if n := counter(t, e.reg, "backstop_inbox_duplicates_total", "inbox", "orders", "source", "test"); n != 1 {
			t.Errorf("backstop_inbox_duplicates_total = %d, want 1 (the first message sent again)", n)
		}
		entries, err := e.s.DLQ().List(e.ctx, nil)
		if err != nil || len(entries) != 1 {
			t.Fatalf("List = %d entries, %v; want the other message kept once", len(entries), err)
		}
		if d := entries[0]; string(d.Payload) != string(other.Payload) || !strings.Contains(d.ErrorMessage, "m-1") ||
			d.Metadata["first_row_id"] == nil || d.Metadata["first_row_id"] == "" {
			t.Errorf("dead letter payload %s, error %q, metadata %v; want the other payload, the id and the first row",
				d.Payload, d.ErrorMessage, d.Metadata)
		}
		if n := e.count(`SELECT count(*) FROM ` + k.outbox(e.spec) + ` WHERE destination = 'inbox:orders'`); n != 1 {
			t.Errorf("%d inbox rows, want the first message's only", n)
		}
	})
}
