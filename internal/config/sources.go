package config

import (
	"fmt"
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
		from = fmt.Sprintf("nats %s stream %s consumer %s", Redact(s.URL), s.Stream, s.Consumer)
	case "rabbitmq":
		from = fmt.Sprintf("rabbitmq %s queue %s", Redact(s.URL), s.Queue)
	case "http":
		from = "http " + s.Listen + s.Path
	}
	return fmt.Sprintf("source %s: %s, stream key %s, dedup window %s -> forward to %s\n",
		s.Inbox, from, s.StreamKey, s.DedupWindow.D(), strings.Join(s.Forward.To, ", "))
}
