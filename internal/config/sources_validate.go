package config

import (
	"cmp"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"

	"github.com/backstophq/backstop/inbox"
	"github.com/backstophq/backstop/outbox"
	natstransport "github.com/backstophq/backstop/transport/nats"
	"github.com/backstophq/backstop/transport/webhook"
)

// reservedPaths are the server's own paths, which a source on its
// listener may not take.
var reservedPaths = []string{"/v1", "/metrics", "/healthz", "/readyz"}

// validateSources checks the sources against each other and against the
// destinations (names) and the server's listener.
func (c *Config) validateSources(names map[string]bool) []*Error {
	var errs []*Error
	inboxes := map[string]bool{}
	paths := map[string]string{} // listen address + path -> source key
	for i := range c.Sources {
		s := &c.Sources[i]
		p := fmt.Sprintf("sources[%d]", i)
		errs = append(errs, s.validate(p)...)
		bad := func(key, format string, args ...any) {
			errs = append(errs, &Error{Key: p + "." + key, Problem: fmt.Sprintf(format, args...)})
		}
		if s.Inbox != "" {
			if inboxes[s.Inbox] {
				bad("inbox", "%q is named twice: each source writes into an inbox of its own", s.Inbox)
			}
			inboxes[s.Inbox] = true
			if names[inbox.Destination(s.Inbox)] {
				bad("inbox", "destination %q is the inbox's own: rename the destination", inbox.Destination(s.Inbox))
			}
		}
		if len(s.Forward.To) == 0 {
			bad("forward.to", "names no destination: say where received messages go")
		}
		for j, to := range s.Forward.To {
			switch {
			case slices.Contains(s.Forward.To[:j], to):
				bad(fmt.Sprintf("forward.to[%d]", j), "%q is named twice: each received message would be forwarded to it twice", to)
			case to == TopicDestination && len(c.Routes) > 0:
			case !names[to]:
				bad(fmt.Sprintf("forward.to[%d]", j), "unknown destination %q", to)
			}
		}
		if s.Type != "http" || !strings.HasPrefix(s.Path, "/") {
			continue
		}
		if s.Listen == c.Listen || sameAddress(s.Listen, c.Listen) {
			bad("listen", "is the server's own listen address: leave it out to receive on the server's listener")
		}
		if s.Listen == "" {
			for _, r := range reservedPaths {
				if s.Path == "/" || s.Path == r || strings.HasPrefix(s.Path, r+"/") {
					bad("path", "%q is the server's own (the dashboard, /v1, /metrics, /healthz, /readyz): choose another, such as /inbox/%s", s.Path, s.Inbox)
					break
				}
			}
		}
		at := s.Listen + " " + s.Path
		if other, taken := paths[at]; taken {
			bad("path", "%q is %s's path already", s.Path, other)
		}
		paths[at] = p
	}
	return errs
}

// validate checks one source on its own.
func (s *Source) validate(p string) []*Error {
	var errs []*Error
	bad := func(key, format string, args ...any) {
		errs = append(errs, &Error{Key: p + "." + key, Problem: fmt.Sprintf(format, args...)})
	}
	if s.Inbox == "" {
		bad("inbox", "is required: the name of the inbox the source writes into")
	} else if err := (&outbox.Message{Destination: inbox.Destination(s.Inbox), Type: "t"}).Validate(); err != nil || !inboxName(s.Inbox) {
		bad("inbox", "%q: an inbox name is 1 to %d bytes of a-z, A-Z, 0-9, '.', '_' and '-'", s.Inbox, inbox.MaxNameLen)
	}
	oneOf(&errs, p+".type", s.Type, "nats", "rabbitmq", "http")
	// The settings of another kind of source are refused, by name.
	for _, k := range []struct {
		key   string
		set   bool
		types string
	}{
		{"url", s.URL != "", "nats rabbitmq"},
		{"stream", s.Stream != "", "nats"},
		{"consumer", s.Consumer != "", "nats"},
		{"subject", s.Subject != "", "nats"},
		{"ack_wait", s.AckWait != 0, "nats"},
		{"queue", s.Queue != "", "rabbitmq"},
		{"prefetch", s.Prefetch != 0, "rabbitmq"},
		{"path", s.Path != "", "http"},
		{"listen", s.Listen != "", "http"},
		{"secret", s.Secret != "", "http"},
		{"additional_secrets", len(s.AdditionalSecrets) > 0, "http"},
		{"tolerance", s.Tolerance != 0, "http"},
		{"headers", s.Headers != nil, "http"},
	} {
		if k.set && !contains(strings.Fields(k.types), s.Type) && contains([]string{"nats", "rabbitmq", "http"}, s.Type) {
			bad(k.key, "is not a setting of %s (only of %s sources)", aSource(s.Type), strings.ReplaceAll(k.types, " ", ", "))
		}
	}
	if d := s.DedupWindow.D(); d != 0 && d < inbox.MinDedupWindow {
		bad("dedup_window", "must be at least %v (a source redelivers after its own wait for an acknowledgement), got %v", inbox.MinDedupWindow, d)
	}
	required := func(key string, v string) {
		if v == "" {
			bad(key, "is required for %s", aSource(s.Type))
		}
	}
	switch s.Type {
	case "nats", "rabbitmq":
		required("url", s.URL)
		if s.URL != "" {
			want := map[string][]string{"nats": {"nats", "tls", "ws", "wss"}, "rabbitmq": {"amqp", "amqps"}}[s.Type]
			if u, err := url.Parse(s.URL); err != nil || u.Scheme == "" || u.Host == "" {
				bad("url", "%q is not an absolute URL", Redact(s.URL))
			} else if !contains(want, u.Scheme) {
				bad("url", "scheme %q does not suit a %s source (want %s)", u.Scheme, s.Type, strings.Join(want, " or "))
			} else if problem := brokerPorts(s.Type, s.URL); problem != "" {
				bad("url", "%s", problem)
			}
		}
	}
	switch s.Type {
	case "nats":
		required("stream", s.Stream)
		required("consumer", s.Consumer)
		if strings.ContainsAny(s.Consumer, natstransport.InvalidNameChars) {
			bad("consumer", "%q: a durable name may not hold '.', '*', '>', '/', '\\' or white space", s.Consumer)
		}
		if err := natstransport.CheckStreamName(s.Stream); err != nil {
			bad("stream", "%v", err)
		}
		if problem := filterSubject(s.Subject); problem != "" {
			bad("subject", "%q: %s", s.Subject, problem)
		}
		// A message whose ack was lost comes again after ack_wait: its id
		// must still be remembered then.
		if wait, window := cmp.Or(s.AckWait.D(), DefaultAckWait), cmp.Or(s.DedupWindow.D(), DefaultDedupWindow); wait >= window {
			bad("ack_wait", "%v is not shorter than dedup_window (%v): a message whose acknowledgement was lost would come again after its id was forgotten, and be handled twice",
				wait, window)
		}
	case "rabbitmq":
		required("queue", s.Queue)
		if s.Prefetch < 0 || s.Prefetch > 65535 {
			bad("prefetch", "must be 0 to 65535 (an AMQP short; 65536 would reach the broker as 0, no limit), got %d", s.Prefetch)
		}
	case "http":
		required("secret", s.Secret)
		for i, sec := range s.Secrets() {
			if i == 0 && len(sec) == 0 {
				continue // reported as required
			}
			if _, err := webhook.DecodeSecret(sec); err != nil {
				key := "secret"
				if i > 0 {
					key = fmt.Sprintf("additional_secrets[%d]", i-1)
				}
				bad(key, "%v", err)
			}
		}
		if s.Path == "" {
			bad("path", "is required for an http source on the server's listener (or give it a listen address of its own)")
		} else if !strings.HasPrefix(s.Path, "/") || strings.ContainsAny(s.Path, " \t{}") {
			bad("path", "%q must start with / and hold no spaces or braces", s.Path)
		}
		if s.Listen != "" {
			if _, _, err := net.SplitHostPort(s.Listen); err != nil {
				bad("listen", "%q is not host:port", s.Listen)
			}
		}
		// A signed request is accepted while its timestamp is within the
		// tolerance either side of now, so for up to twice the tolerance
		// after it was first received; only the id's de-duplication stops
		// a replay meanwhile. A shorter window let a captured request be
		// stored and forwarded again.
		tol, window := cmp.Or(s.Tolerance.D(), webhook.DefaultTolerance), cmp.Or(s.DedupWindow.D(), DefaultDedupWindow)
		if window/2 < tol { // not 2*tol: a tolerance over 146 years overflowed it, negative, and passed
			bad("dedup_window", "%v is shorter than twice the tolerance (%v): a signed request could be replayed and stored again after its id was forgotten",
				window, tol)
		}
	}
	kind, name := s.StreamKeyOf()
	switch {
	case kind == "header" && (name == "" || strings.ContainsAny(name, " \t:")):
		bad("stream_key", "%q: want header:<Name>, such as header:X-Order-Id", s.StreamKey)
	case kind == "subject" && s.Type != "nats":
		bad("stream_key", "subject is a nats source's, not %s's (a rabbitmq source has routing_key)", aSource(s.Type))
	case kind == "routing_key" && s.Type != "rabbitmq":
		bad("stream_key", "routing_key is a rabbitmq source's, not %s's", aSource(s.Type))
	case kind != "header" && kind != "subject" && kind != "routing_key" && kind != "none":
		bad("stream_key", "%q is not one of header:<Name>, subject, routing_key, none", s.StreamKey)
	}
	return errs
}

// filterSubject says what makes subject an invalid filter subject of a
// consumer, which the client refuses when serve creates it ("nats: invalid
// subject name", naming no key), or "" (empty: every subject).
func filterSubject(subject string) string {
	if subject == "" {
		return ""
	}
	if strings.IndexFunc(subject, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
		return "a subject holds no white space or control character"
	}
	tokens := strings.Split(subject, ".")
	for i, tok := range tokens {
		switch {
		case tok == "":
			return "a subject has no empty token (no leading, trailing or doubled '.')"
		case tok == ">" && i < len(tokens)-1:
			return "'>' may only be the last token"
		}
	}
	return ""
}

// sameAddress reports whether listening on a and b (host:port) would take
// the same address, spelt differently: the same port, and hosts that are
// the same (localhost is 127.0.0.1) or one of them every address. serve
// then stopped at its start with "bind: address already in use", naming
// no key, though config check said ok.
func sameAddress(a, b string) bool {
	ha, pa, err := net.SplitHostPort(a)
	if err != nil {
		return false
	}
	hb, pb, err := net.SplitHostPort(b)
	if err != nil {
		return false
	}
	na, errA := net.LookupPort("tcp", pa)
	nb, errB := net.LookupPort("tcp", pb)
	if errA != nil || errB != nil || na == 0 || na != nb {
		return false
	}
	norm := func(h string) string {
		switch h {
		case "", "0.0.0.0", "::":
			return "" // every address
		case "localhost":
			return "127.0.0.1"
		}
		if ip := net.ParseIP(h); ip != nil {
			return ip.String()
		}
		return strings.ToLower(h)
	}
	ha, hb = norm(ha), norm(hb)
	return ha == "" || hb == "" || ha == hb
}

// aSource is "a nats source", "an http source".
func aSource(typ string) string {
	if typ == "http" {
		return "an http source"
	}
	return "a " + typ + " source"
}

func inboxName(name string) bool {
	if name == "" || len(name) > inbox.MaxNameLen {
		return false
	}
	for _, r := range name {
		if !(r == '.' || r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}
