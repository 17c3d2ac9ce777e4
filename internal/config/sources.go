package config

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/backstophq/backstop/inbox"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/transport/webhook"
)

// Defaults of a source's settings.
const (
	DefaultDedupWindow = inbox.DefaultDedupWindow // 7 days
	DefaultAckWait     = 30 * time.Second
	DefaultStreamKey   = "header:Backstop-Stream"
)

// Source is a receiver that serve runs: it takes messages from a NATS
// JetStream consumer, a RabbitMQ queue or signed HTTP requests, stores
// each once in the inbox Inbox, and handles them as Forward says.
type Source struct {
	// Inbox names the inbox the source writes into: its rows are the
	// destination inbox:<Inbox> in the admin API, the metrics and the
	// dead-letter queue. Required, unique; a-z, A-Z, 0-9, '.', '_', '-'.
	Inbox string `yaml:"inbox"`
	// Type is nats, rabbitmq or http.
	Type string `yaml:"type"`
	// URL is the NATS server or the AMQP broker.
	URL string `yaml:"url"`

	// Stream is the JetStream stream to read (nats); it must exist.
	Stream string `yaml:"stream"`
	// Consumer is the durable consumer's name (nats), created or updated
	// on the stream with explicit acks and one message in flight.
	Consumer string `yaml:"consumer"`
	// Subject filters the stream's subjects (nats); empty means all.
	Subject string `yaml:"subject"`
	// AckWait is how soon JetStream delivers again a message left
	// unacknowledged (nats). Default 30s.
	AckWait Duration `yaml:"ack_wait"`

	// Queue is the RabbitMQ queue to consume; it must exist.
	Queue string `yaml:"queue"`
	// Prefetch is the deliveries the broker sends ahead of their ack
	// (rabbitmq). Default 1, which keeps the queue's order.
	Prefetch int `yaml:"prefetch"`

	// Path is where the HTTP receiver answers: on the server's listener,
	// or on Listen when it is set (then default /).
	Path string `yaml:"path"`
	// Listen, when set, is an address of the HTTP source's own.
	Listen string `yaml:"listen"`
	// Secret checks the requests' Standard Webhooks signatures (http):
	// whsec_<base64> or raw bytes. Required.
	Secret string `yaml:"secret"`
	// AdditionalSecrets are accepted too, while the sender rotates keys.
	AdditionalSecrets []string `yaml:"additional_secrets"`
	// Tolerance is how far a request's timestamp may be from now (http).
	// Default 5m.
	Tolerance Duration `yaml:"tolerance"`
	// Headers names the request headers kept with a message (http).
	// Default Content-Type.
	Headers []string `yaml:"headers"`

	// StreamKey is a message's ordering key: header:<Name>, subject (the
	// NATS subject), routing_key (the AMQP routing key) or none. Default
	// header:Backstop-Stream, which Backstop's transports set.
	StreamKey string `yaml:"stream_key"`
	// DedupWindow is how long a message id is remembered: a redelivery
	// within it is dropped. Default 168h (7 days).
	DedupWindow Duration `yaml:"dedup_window"`
	// Forward says where received messages go. Required.
	Forward Forward `yaml:"forward"`
}

// Forward handles a source's messages by enqueueing a copy of each for
// every destination of To, in the same transaction as the inbox's
// completion of the message: each is forwarded once, in its stream's
// order, with its type, stream, payload and headers.
type Forward struct {
	// To names destinations of this file, or topic (the routes' fan-out)
	// when there are routes. At least one.
	To []string `yaml:"to"`
}

// StreamKeyOf parses StreamKey: kind is header, subject, routing_key or
// none, and name the header's name for kind header.
func (s *Source) StreamKeyOf() (kind, name string) {
	if h, ok := strings.CutPrefix(s.StreamKey, "header:"); ok {
		return "header", h
	}
	return s.StreamKey, ""
}

// Secrets returns Secret and AdditionalSecrets as keys.
func (s *Source) Secrets() [][]byte {
	out := [][]byte{[]byte(s.Secret)}
	for _, a := range s.AdditionalSecrets {
		out = append(out, []byte(a))
	}
	return out
}

func (s *Source) applyDefaults() {
	if s.DedupWindow == 0 {
		s.DedupWindow = Duration(DefaultDedupWindow)
	}
	if s.StreamKey == "" {
		s.StreamKey = DefaultStreamKey
	}
	switch s.Type {
	case "nats":
		if s.AckWait == 0 {
			s.AckWait = Duration(DefaultAckWait)
		}
	case "rabbitmq":
		if s.Prefetch == 0 {
			s.Prefetch = 1
		}
	case "http":
		if s.Tolerance == 0 {
			s.Tolerance = Duration(webhook.DefaultTolerance)
		}
		if s.Path == "" && s.Listen != "" {
			s.Path = "/"
		}
	}
}

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
			case to == TopicDestination && len(c.Routes) > 0:
			case !names[to]:
				bad(fmt.Sprintf("forward.to[%d]", j), "unknown destination %q", to)
			}
		}
		if s.Type != "http" || !strings.HasPrefix(s.Path, "/") {
			continue
		}
		if s.Listen == c.Listen {
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
			bad(k.key, "is not a setting of %s source (only of %s)", aSource(s.Type), strings.ReplaceAll(k.types, " ", ", "))
		}
	}
	required := func(key string, v string) {
		if v == "" {
			bad(key, "is required for %s source", aSource(s.Type))
		}
	}
	switch s.Type {
	case "nats", "rabbitmq":
		required("url", s.URL)
		if s.URL != "" {
			want := map[string][]string{"nats": {"nats", "tls", "ws", "wss"}, "rabbitmq": {"amqp", "amqps"}}[s.Type]
			if u, err := url.Parse(s.URL); err != nil || u.Scheme == "" || u.Host == "" {
				bad("url", "%q is not an absolute URL", s.URL)
			} else if !contains(want, u.Scheme) {
				bad("url", "scheme %q does not suit a %s source (want %s)", u.Scheme, s.Type, strings.Join(want, " or "))
			}
		}
	}
	switch s.Type {
	case "nats":
		required("stream", s.Stream)
		required("consumer", s.Consumer)
		if strings.ContainsAny(s.Consumer, ".*> \t") {
			bad("consumer", "%q: a durable name may not hold '.', '*', '>' or spaces", s.Consumer)
		}
	case "rabbitmq":
		required("queue", s.Queue)
		if s.Prefetch < 0 {
			bad("prefetch", "must not be negative")
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

// policy is the store policy of the source's inbox: strict order, the
// default durable retry (a forward fails only when the store does, and
// that is not charged to the message).
func (s *Source) policy() store.Policy {
	r := Retry{}
	r.applyDefaults()
	return store.Policy{Strategy: r.strategy(), MaxAttempts: r.MaxAttempts, Ordering: outbox.OrderingStrict}
}

// summary is the source's line of Summary.
func (s *Source) summary() string {
	var from string
	switch s.Type {
	case "nats":
		from = fmt.Sprintf("nats %s stream %s consumer %s", redactURL(s.URL), s.Stream, s.Consumer)
	case "rabbitmq":
		from = fmt.Sprintf("rabbitmq %s queue %s", redactURL(s.URL), s.Queue)
	case "http":
		from = "http " + s.Listen + s.Path
	}
	return fmt.Sprintf("source %s: %s, stream key %s, dedup window %s -> forward to %s\n",
		s.Inbox, from, s.StreamKey, s.DedupWindow.D(), strings.Join(s.Forward.To, ", "))
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
