package outbox_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/backstophq/backstop/outbox"
)

const sampleTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestValidTraceParent(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{sampleTP, true},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", true},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", false},
		{"", false},
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", false},
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false},
		{"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false},
		{"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0\n", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e473\x00-00f067aa0ba902b7-01", false},
	} {
		if got := outbox.ValidTraceParent(tc.in); got != tc.want {
			t.Errorf("ValidTraceParent(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestAttachTraceParent(t *testing.T) {
	ctx := outbox.ContextWithTraceParent(context.Background(), sampleTP)
	plain := &outbox.Message{Destination: "d", Type: "t"}
	own := &outbox.Message{Destination: "d", Type: "t", Headers: map[string]string{"TraceParent": "mine"}}
	outbox.AttachTraceParent(ctx, plain, own, nil)
	if got := plain.Headers[outbox.TraceParentHeader]; got != sampleTP {
		t.Errorf("plain message: traceparent %q, want %q", got, sampleTP)
	}
	if len(own.Headers) != 1 || own.Headers["TraceParent"] != "mine" {
		t.Errorf("a message's own traceparent was replaced: %v", own.Headers)
	}

	bad := outbox.ContextWithTraceParent(context.Background(), "not-a-trace")
	m := &outbox.Message{Destination: "d", Type: "t"}
	outbox.AttachTraceParent(bad, m)
	if m.Headers != nil {
		t.Errorf("an invalid traceparent was attached: %v", m.Headers)
	}
}

func FuzzValidTraceParent(f *testing.F) {
	f.Add(sampleTP)
	f.Add("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x")
	f.Fuzz(func(t *testing.T, s string) {
		if !outbox.ValidTraceParent(s) {
			return
		}
		// Whatever is accepted must be safe to send as a header value.
		m := &outbox.Message{Destination: "d", Type: "t", Headers: map[string]string{outbox.TraceParentHeader: s}}
		if err := m.Validate(); err != nil {
			t.Fatalf("accepted traceparent %q fails message validation: %v", s, err)
		}
	})
}

// Messages built from one headers map of the application's (defaults it
// shares) each get the traceparent of the context they are enqueued with,
// and the map is left as it was. The traceparent used to be written into
// that map: every later message built from it carried the first request's
// trace, and two requests enqueueing at once wrote to the map together
// (a fatal "concurrent map writes").
func TestAttachTraceParentLeavesASharedHeadersMapAlone(t *testing.T) {
	shared := map[string]string{"X-Source": "billing"}
	other := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	first := &outbox.Message{Destination: "d", Type: "t", Headers: shared}
	outbox.AttachTraceParent(outbox.ContextWithTraceParent(context.Background(), sampleTP), first)
	second := &outbox.Message{Destination: "d", Type: "t", Headers: shared}
	outbox.AttachTraceParent(outbox.ContextWithTraceParent(context.Background(), other), second)
	if got := first.Headers[outbox.TraceParentHeader]; got != sampleTP {
		t.Errorf("first message: traceparent %q, want %q", got, sampleTP)
	}
	if got := second.Headers[outbox.TraceParentHeader]; got != other {
		t.Errorf("second message: traceparent %q, want its own context's %q", got, other)
	}
	if len(shared) != 1 || shared["X-Source"] != "billing" {
		t.Errorf("the application's map was changed: %v", shared)
	}

	// At once, from two requests (the race detector watches the map).
	shared = map[string]string{"X-Source": "billing"}
	done := make(chan struct{})
	for _, tp := range []string{sampleTP, other} {
		go func() {
			defer func() { done <- struct{}{} }()
			ctx := outbox.ContextWithTraceParent(context.Background(), tp)
			for range 100 {
				outbox.AttachTraceParent(ctx, &outbox.Message{Destination: "d", Type: "t", Headers: shared})
			}
		}()
	}
	<-done
	<-done
}

// A message whose headers are at the limits is enqueued without the
// traceparent, not refused for it: it was refused ("headers hold 65
// entries, over the limit of 64") only when a trace context was present,
// for a header the application never wrote.
func TestAttachTraceParentLeavesAFullMessageValid(t *testing.T) {
	ctx := outbox.ContextWithTraceParent(context.Background(), sampleTP)
	many := map[string]string{}
	for i := range outbox.DefaultMaxHeaders {
		many[fmt.Sprintf("X-H%d", i)] = "v"
	}
	big := map[string]string{"X-Big": strings.Repeat("b", outbox.DefaultMaxHeaderBytes-len("X-Big")-10)}
	for name, h := range map[string]map[string]string{"64 headers": many, "16 KiB of headers": big} {
		m := &outbox.Message{Destination: "d", Type: "t", Headers: h}
		if err := m.Validate(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		outbox.AttachTraceParent(ctx, m)
		if err := m.Validate(); err != nil {
			t.Errorf("%s: after the traceparent was attached: %v", name, err)
		}
	}
	roomy := &outbox.Message{Destination: "d", Type: "t", Headers: map[string]string{"X-Big": strings.Repeat("b", outbox.DefaultMaxHeaderBytes-len("X-Big")-len(outbox.TraceParentHeader)-len(sampleTP))}}
	outbox.AttachTraceParent(ctx, roomy)
	if roomy.Headers[outbox.TraceParentHeader] != sampleTP {
		t.Errorf("a message with just the room for it did not get the traceparent")
	}
}
