package natsinbox

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop/outbox"
)

// fakeMsg is a JetStream message as received exposes it: headers, data,
// subject and metadata; the other methods are never called.
type fakeMsg struct {
	jetstream.Msg
	h       nats.Header
	data    []byte
	subject string
}

func (m fakeMsg) Headers() nats.Header { return m.h }
func (m fakeMsg) Data() []byte         { return m.data }
func (m fakeMsg) Subject() string      { return m.subject }
func (m fakeMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{Stream: "S", Sequence: jetstream.SequencePair{Stream: 7},
		Timestamp: time.Unix(1700000000, 0)}, nil
}

// FuzzNATSReceived: whatever headers a publisher sets (any name, any
// value, repeated, past the inbox's limits), the headers received keeps
// are ones a message can carry within the limits, so a message is never
// refused (terminated: lost) for a header; NATS' and Backstop's own
// headers are never kept as the message's.
func FuzzNATSReceived(f *testing.F) {
	f.Add("X-Tenant", "acme", "x-tenant", "other", 3, 10)
	f.Add("Nats-Msg-Id", "m1", "backstop-inbox-id", "forged", 0, 0)
	f.Add("my header", "a\x01b", "\xff", "\x00", 70, 300)
	f.Add("X-Big", strings.Repeat("v", 20000), "X-Tab", "a\tb", 1, 20000)
	limits := outbox.Limits{}.WithDefaults()
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string, many, size int) {
		h := nats.Header{}
		h[k1] = append(h[k1], v1)
		h[k2] = append(h[k2], v2)
		for i := range min(max(many, 0), 200) {
			h.Set(fmt.Sprintf("X-%d", i), strings.Repeat("v", min(max(size, 0), 1<<16)/max(many, 1)))
		}
		msg, dropped, err := received(fakeMsg{h: h, data: []byte(`{}`), subject: "orders.created"}, limits)
		if err != nil {
			t.Fatalf("received: %v", err)
		}
		for k, v := range msg.Headers {
			if err := outbox.CheckHeader(k, v); err != nil {
				t.Fatalf("kept header %q: %q the message cannot carry: %v", k, v, err)
			}
			if strings.HasPrefix(strings.ToLower(k), "nats-") || strings.HasPrefix(strings.ToLower(k), "backstop-") {
				t.Fatalf("kept %q, a header of NATS' or Backstop's own", k)
			}
		}
		if got := len(msg.Headers) + len(dropped); got > len(h) {
			t.Fatalf("%d headers kept or left out of %d given", got, len(h))
		}
		m := &outbox.Message{Destination: "d", Type: msg.Type, Payload: msg.Payload, Headers: msg.Headers}
		if err := m.PrepareLimits(limits); err != nil {
			t.Fatalf("a message with the headers kept cannot be stored: %v", err)
		}
	})
}
