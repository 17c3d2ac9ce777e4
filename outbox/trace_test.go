package outbox_test

import (
	"context"
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
