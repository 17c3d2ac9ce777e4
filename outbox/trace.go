package outbox

import (
	"context"
	"maps"
	"strings"
)

// TraceParentHeader is the W3C Trace Context header a message carries so
// that its delivery joins the trace that caused it. Every transport sends a
// message's headers with it (an HTTP header, a NATS header, an AMQP
// header), so a receiver reads it where it reads its other headers.
const TraceParentHeader = "traceparent"

type traceParentKey struct{}

// ContextWithTraceParent returns a context carrying tp, a W3C traceparent
// value such as "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".
// Messages enqueued with that context carry it in their TraceParentHeader
// unless they set the header themselves. An invalid tp is ignored, so a
// malformed value from a caller's request never reaches a destination.
func ContextWithTraceParent(ctx context.Context, tp string) context.Context {
	if !ValidTraceParent(tp) {
		return ctx
	}
	return context.WithValue(ctx, traceParentKey{}, tp)
}

// TraceParentFromContext returns the traceparent ctx carries, if any.
func TraceParentFromContext(ctx context.Context) (string, bool) {
	tp, ok := ctx.Value(traceParentKey{}).(string)
	return tp, ok
}

// AttachTraceParent gives each message without a traceparent header the
// one ctx carries. The stores call it when they enqueue. The message gets
// a new Headers map, a copy of its own with the traceparent added: the map
// it had is the application's, which may share it between messages (and
// requests), and is left as it was. A message whose headers have no room
// left under the default Limits (DefaultMaxHeaders entries, or too few of
// DefaultMaxHeaderBytes for the traceparent) is left without it: the
// trace is extra, and must not make a valid message invalid.
func AttachTraceParent(ctx context.Context, msgs ...*Message) {
	tp, ok := TraceParentFromContext(ctx)
	if !ok {
		return
	}
	for _, m := range msgs {
		if m == nil || hasHeader(m.Headers, TraceParentHeader) || !roomFor(m.Headers, TraceParentHeader, tp) {
			continue
		}
		h := make(map[string]string, len(m.Headers)+1)
		maps.Copy(h, m.Headers)
		h[TraceParentHeader] = tp
		m.Headers = h
	}
}

// roomFor reports whether h can take one more header, name with value,
// within the default Limits.
func roomFor(h map[string]string, name, value string) bool {
	if len(h) >= DefaultMaxHeaders {
		return false
	}
	total := len(name) + len(value)
	for k, v := range h {
		total += len(k) + len(v)
	}
	return total <= DefaultMaxHeaderBytes
}

func hasHeader(h map[string]string, name string) bool {
	for k := range h {
		if strings.EqualFold(k, name) {
			return true
		}
	}
	return false
}

// ValidTraceParent reports whether s is a traceparent value of the W3C
// Trace Context format: version, trace id, parent id and flags in lower-case
// hex separated by dashes, the ids not all zeros, and version ff refused.
// Versions above 00 may append fields, which are accepted as the
// specification asks.
func ValidTraceParent(s string) bool {
	if len(s) < 55 {
		return false
	}
	version, traceID, parentID, flags := s[0:2], s[3:35], s[36:52], s[53:55]
	if s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return false
	}
	if !lowerHex(version) || version == "ff" || !lowerHex(traceID) || !lowerHex(parentID) || !lowerHex(flags) {
		return false
	}
	if allZeros(traceID) || allZeros(parentID) {
		return false
	}
	if len(s) > 55 {
		if version == "00" || s[55] != '-' {
			return false
		}
		for i := 56; i < len(s); i++ {
			if s[i] < 0x21 || s[i] > 0x7e {
				return false
			}
		}
	}
	return true
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func allZeros(s string) bool {
	return strings.Trim(s, "0") == ""
}
