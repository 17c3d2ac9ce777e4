package inbox

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/errorhandling"
)

// TestRefusedMessagesAreKeptAsDeadLetters: a message Receive refuses (an
// id that is not text, a type with a NUL, a payload over the limit) is
// still ErrInvalid, for the receiver to refuse it, but it is kept first as
// a dead letter of the inbox's destination with why: a broker's receiver
// terminates or rejects it, and a source without a dead-letter queue of
// its own lost it. The same message refused again is kept once; a
// payload over the limit is not kept, its size is.
func TestRefusedMessagesAreKeptAsDeadLetters(t *testing.T) {
	forEachStore(t, func(t *testing.T, k kind) {
		e := newEnv(t, k)
		cfg := e.config()
		cfg.Limits.MaxPayloadBytes = 1024
		var told []string // the relay's dead-letter manager hears of each, once
		cfg.Relay.DeadLetters = dlq.NewManager(e.s.DLQ(), 0)
		cfg.Relay.DeadLetters.OnEntryAdded(func(x *dlq.Entry) { told = append(told, x.ID) })
		in := e.newInbox(cfg)
		badID := received("bad\xffid\x00", "order.created", "s\x01")
		badID.Payload = []byte(`{"order":7}`)
		badID.Headers = map[string]string{"X-Ok": "yes", "X-Nul": "a\x00b"}
		badType := received("t-1", "order\x00created", "")
		big := received("big-1", "order.created", "")
		big.Payload = bytes.Repeat([]byte("x"), 2048)
		for _, r := range []Received{badID, badType, big, badID} {
			if _, err := in.Receive(e.ctx, r); !errors.Is(err, ErrInvalid) {
				t.Fatalf("Receive(%q) = %v, want ErrInvalid", r.ID, err)
			}
		}
		es, err := e.s.DLQ().List(e.ctx, &dlq.Filters{Destination: Destination(cfg.Name)})
		if err != nil {
			t.Fatal(err)
		}
		if len(es) != 3 || len(told) != 3 {
			t.Fatalf("%d dead letters, the manager told of %d; want 3 (one per refused message): %+v", len(es), len(told), es)
		}
		byID := map[string]*dlq.Entry{}
		for _, x := range es {
			got, err := e.s.DLQ().Get(e.ctx, x.ID) // with its payload and metadata
			if err != nil {
				t.Fatal(err)
			}
			byID[got.Metadata["source_id"].(string)] = got
			if got.Reason != errorhandling.ReasonValidationFailure || got.Status != dlq.StatusPending || got.ErrorMessage == "" {
				t.Errorf("entry %s: reason %v status %v error %q", got.ID, got.Reason, got.Status, got.ErrorMessage)
			}
		}
		a := byID[`"bad\xffid\x00"`]
		if a == nil {
			t.Fatalf("no entry for the bad id: %v", byID)
		}
		if string(a.Payload) != `{"order":7}` || a.Type != "order.created" || a.Stream != "s\x01" ||
			a.Headers["X-Ok"] != "yes" || strings.Contains(a.Headers["X-Nul"], "\x00") || !strings.Contains(a.ErrorMessage, "UTF-8") {
			t.Errorf("bad id kept as %+v", a)
		}
		if b := byID[`"t-1"`]; b == nil || strings.Contains(b.Type, "\x00") || !strings.HasPrefix(b.Type, "order") {
			t.Errorf("bad type kept as %+v", b)
		}
		if c := byID[`"big-1"`]; c == nil || len(c.Payload) != 0 || c.Metadata["payload_bytes"] != float64(2048) {
			t.Errorf("big payload kept as %+v", c)
		}
		if n := e.count(`SELECT count(*) FROM ` + e.k.outbox(e.spec)); n != 0 {
			t.Errorf("%d outbox rows, want none", n)
		}
	})
}
