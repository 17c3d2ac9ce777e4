package transporttest

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/transport"
)

// env is one test's transport, receiver and deadline.
type env struct {
	t      *testing.T
	h      Harness
	tr     transport.Transport
	rec    Receiver
	ctx    context.Context
	closed bool
}

func newEnv(t *testing.T, h Harness) *env {
	t.Helper()
	tr, rec := h.New(t)
	if tr == nil || rec == nil {
		t.Fatal("transporttest: Harness.New returned a nil transport or receiver")
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.Timeout)
	e := &env{t: t, h: h, tr: tr, rec: rec, ctx: ctx}
	t.Cleanup(func() {
		cancel()
		if !e.closed {
			if err := tr.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		}
	})
	return e
}

// message returns a new message of stream with a payload naming n.
func (e *env) message(stream string, n int) *outbox.Message {
	e.t.Helper()
	id, err := uuid.NewV7()
	if err != nil {
		e.t.Fatalf("new id: %v", err)
	}
	return &outbox.Message{
		ID:          id,
		Destination: "transporttest",
		Stream:      stream,
		Type:        "transporttest.event",
		Payload:     fmt.Appendf(nil, `{"n":%d,"stream":%q}`, n, stream),
	}
}

// deliver delivers m and fails the test on an error.
func (e *env) deliver(m *outbox.Message) {
	e.t.Helper()
	if err := e.tr.Deliver(e.ctx, m); err != nil {
		e.t.Fatalf("Deliver %s: %v", m.ID, err)
	}
}

// wait returns the deliveries once at least n have arrived.
func (e *env) wait(n int) []Delivery {
	e.t.Helper()
	got, err := e.rec.Received(e.ctx, n)
	if err != nil {
		e.t.Fatalf("Received(%d): %v (got %d)", n, err, len(got))
	}
	return got
}

// fence delivers one last message and waits for it, so that whatever the
// messages before it were going to produce has arrived (see the package
// doc). It returns the deliveries that arrived before the fence's,
// without it.
func (e *env) fence() []Delivery {
	e.t.Helper()
	f := e.message("transporttest-fence", -1)
	f.Type = "transporttest.fence"
	e.deliver(f)
	want := f.ID.String()
	n := 1
	for {
		got := e.wait(n)
		for i, d := range got {
			if d.ID == want {
				return append(got[:i:i], got[i+1:]...)
			}
		}
		n = len(got) + 1
	}
}

// count returns how many deliveries carry id.
func count(ds []Delivery, id uuid.UUID) int {
	n := 0
	for _, d := range ds {
		if d.ID == id.String() {
			n++
		}
	}
	return n
}

// find returns the first delivery of id.
func find(t *testing.T, ds []Delivery, id uuid.UUID) Delivery {
	t.Helper()
	for _, d := range ds {
		if d.ID == id.String() {
			return d
		}
	}
	t.Fatalf("message %s did not arrive (%d deliveries)", id, len(ds))
	return Delivery{}
}

// sameMessage checks that d carries m's id, stream, type and payload.
func sameMessage(t *testing.T, d Delivery, m *outbox.Message) {
	t.Helper()
	if d.ID != m.ID.String() {
		t.Errorf("ID = %q, want %q", d.ID, m.ID)
	}
	if d.Stream != m.Stream {
		t.Errorf("Stream = %q, want %q", d.Stream, m.Stream)
	}
	if d.Type != m.Type {
		t.Errorf("Type = %q, want %q", d.Type, m.Type)
	}
	if !bytes.Equal(d.Payload, m.Payload) {
		t.Errorf("Payload = %q, want %q", d.Payload, m.Payload)
	}
}

// header looks name up in h case-insensitively.
func header(h map[string]string, name string) (string, bool) {
	if v, ok := h[name]; ok {
		return v, true
	}
	for k, v := range h {
		if strings.EqualFold(k, name) {
			return v, true
		}
	}
	return "", false
}
