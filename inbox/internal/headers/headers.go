// Package headers keeps the headers a received message can carry: the
// receivers (HTTP, NATS, RabbitMQ) leave out, with a warning, a header the
// outbox would refuse, rather than lose or bounce the whole message.
package headers

import (
	"net/http"
	"strings"

	"github.com/backstophq/backstop/outbox"
)

// Kept collects a message's headers, each under its Canonical name: the
// first value given for a name, and only what a message can carry
// (outbox.CheckHeader; a traceparent only when valid,
// outbox.ValidTraceParent) within the bounds set (zero: none). The others are
// named in Dropped, as given.
type Kept struct {
	Headers map[string]string
	Dropped []string
	// MaxHeaders and MaxBytes bound the headers kept, as
	// outbox.Limits.MaxHeaders and MaxHeaderBytes count them.
	MaxHeaders, MaxBytes int
	size                 int
}

// Within returns a Kept bounded by limits' MaxHeaders and MaxHeaderBytes.
func Within(limits outbox.Limits) Kept {
	return Kept{MaxHeaders: limits.MaxHeaders, MaxBytes: limits.MaxHeaderBytes}
}

// Add keeps name: value, or names it in Dropped.
func (k *Kept) Add(name, value string) {
	canon := Canonical(name)
	_, taken := k.Headers[canon]
	if taken || outbox.CheckHeader(canon, value) != nil ||
		(canon == outbox.TraceParentHeader && !outbox.ValidTraceParent(value)) ||
		(k.MaxHeaders > 0 && len(k.Headers) >= k.MaxHeaders) ||
		(k.MaxBytes > 0 && k.size+len(canon)+len(value) > k.MaxBytes) {
		k.Dropped = append(k.Dropped, name)
		return
	}
	if k.Headers == nil {
		k.Headers = map[string]string{}
	}
	k.Headers[canon] = value
	k.size += len(canon) + len(value)
}

// TraceContext are the names of the W3C Trace Context headers, which
// every receiver keeps: a message that came with a trace carries it on.
var TraceContext = []string{outbox.TraceParentHeader, TraceStateHeader}

// TraceStateHeader is the W3C Trace Context header that carries vendors'
// trace data beside the traceparent.
const TraceStateHeader = "tracestate"

// Canonical is the name a header is kept under: the trace context headers
// under their W3C names, in lower case, as the outbox writes a
// traceparent and as tracers look them up in case-sensitive NATS headers
// and AMQP tables (canonicalised to "Traceparent", a trace was lost to
// them on the way through the inbox, and a handler reading
// Headers[outbox.TraceParentHeader] found nothing); the others under
// their canonical HTTP spelling.
func Canonical(name string) string {
	for _, tc := range TraceContext {
		if strings.EqualFold(name, tc) {
			return tc
		}
	}
	return http.CanonicalHeaderKey(name)
}

// CleanNames makes header names (Dropped) fit for a log record.
func CleanNames(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = outbox.CleanText(n, 100)
	}
	return out
}

// HasPrefixFold reports whether s begins with prefix, ignoring case.
func HasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}
