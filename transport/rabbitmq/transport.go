package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/backstophq/backstop/internal/tlsfault"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/transport"
)

// Defaults applied to a zero Config field.
const (
	// DefaultRoutingKey is the routing key template when Config.RoutingKey
	// and Config.RoutingKeyFunc are unset: the message type.
	DefaultRoutingKey = "{type}"
	// DefaultTimeout bounds a publish and its confirm, and a dial.
	DefaultTimeout = 5 * time.Second
	// DefaultChannels is the size of the channel pool.
	DefaultChannels = 8
)

// Config configures a Transport.
type Config struct {
	// URL is the broker, such as "amqp://guest:guest@127.0.0.1:5672/"
	// (amqps:// for TLS; the path names the virtual host). Required.
	URL string
	// Exchange is where messages are published. Empty means the default
	// exchange, which routes a message to the queue named by its routing
	// key. When set, New fails unless the exchange exists.
	Exchange string
	// RoutingKey is a fixed routing key, or a template in which
	// {destination}, {type}, {stream} and {id} are replaced by the
	// message's fields. Empty means DefaultRoutingKey. A key longer than
	// 255 bytes fails the message with a permanent fault.
	RoutingKey string
	// RoutingKeyFunc, when set, returns the routing key of each message
	// and RoutingKey is ignored.
	RoutingKeyFunc func(m *outbox.Message) string
	// AllowUnroutable turns the mandatory flag off: a message no queue is
	// bound to take is confirmed and dropped by the broker. False (the
	// default) publishes mandatory, and such a message fails with
	// ErrUnroutable.
	AllowUnroutable bool
	// NonPersistent publishes in the transient delivery mode (memory only,
	// lost if the broker restarts). False (the default) publishes
	// persistent messages.
	NonPersistent bool
	// Timeout bounds each publish until its confirm, and each dial. Zero
	// means DefaultTimeout; negative is invalid.
	Timeout time.Duration
	// Channels is the number of channels, and so of Deliver calls in
	// flight at once; further calls wait for a free channel. Zero means
	// DefaultChannels; negative is invalid.
	Channels int
	// Limits bound the messages the transport publishes; zero fields mean
	// outbox's defaults (a payload of at most 1 MiB...). A message over a
	// limit, or that outbox validation refuses, fails before publishing
	// as a permanent fault of the message. The broker's max_message_size
	// still applies: a larger body is refused by the broker (code
	// rejected), also the message's fault.
	Limits outbox.Limits
	// Logger receives the warning of a broker that New cannot reach. Nil
	// means slog.Default().
	Logger *slog.Logger
	// AllowReservedHeaders lets a message's RabbitMQ-reserved headers
	// through (see IsReservedHeader: CC and BCC, x-delay, x-death...).
	// False (the default) drops them: they change how the broker routes,
	// delays or dead-letters the message, which a message must not decide
	// unless the destination says so.
	AllowReservedHeaders bool
}

// withDefaults returns c with the zero values replaced by their defaults.
func (c Config) withDefaults() Config {
	if c.RoutingKey == "" {
		c.RoutingKey = DefaultRoutingKey
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Channels == 0 {
		c.Channels = DefaultChannels
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// validate names the first bad field.
func (c Config) validate() error {
	switch {
	case c.URL == "":
		return errors.New("rabbitmq: Config.URL is required")
	case c.Timeout < 0:
		return fmt.Errorf("rabbitmq: Config.Timeout must not be negative (got %v)", c.Timeout)
	case c.Channels < 0:
		return fmt.Errorf("rabbitmq: Config.Channels must not be negative (got %d)", c.Channels)
	case len(c.Exchange) > 255:
		return errors.New("rabbitmq: Config.Exchange is longer than 255 bytes")
	}
	if err := c.Limits.Validate(); err != nil {
		return fmt.Errorf("rabbitmq: Config.Limits: %w", err)
	}
	if _, err := amqp.ParseURI(c.URL); err != nil {
		return fmt.Errorf("rabbitmq: Config.URL: %w", WithoutURL(err))
	}
	return nil
}

// WithoutURL replaces the error of an AMQP URL that does not parse (a
// *url.Error), which quotes the URL up to where it broke and the text it
// read as a port, both of which may be the password; other errors are
// returned as they are. The inbox's receiver (rabbitinbox) uses it too.
func WithoutURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return errors.New("not a valid URL (a user name or password holding a reserved character such as #, /, ?, @ or : must be percent-encoded)")
	}
	return err
}

// ErrClosed is returned by Deliver after Close.
var ErrClosed = errors.New("rabbitmq: transport closed")

// Transport publishes messages to a RabbitMQ exchange. It implements
// transport.Transport and is safe for concurrent use.
type Transport struct {
	cfg     Config
	slots   chan struct{} // one token per channel in use
	dialing chan struct{} // held while dialing: one dial at a time

	// mu guards the fields below. It is never held across a call to the
	// broker: a broker that stops reading (a memory or disk alarm blocks
	// publishers) would otherwise hold every Deliver and Close behind it.
	mu     sync.Mutex
	conn   *amqp.Connection // nil or closed: dialed again on demand
	block  *blocking        // whether the broker blocks conn
	idle   []*pubChannel
	closed bool

	// room tells a full queue from a message over its byte limit.
	room room
}

var _ transport.Transport = (*Transport)(nil)

// New dials the broker and, when cfg.Exchange is set, checks that the
// exchange exists. A bad URL, refused credentials, a TLS handshake that
// cannot succeed as configured (a certificate that does not verify, a
// port that does not speak TLS) or a missing exchange are reported here,
// so that a misconfigured destination refuses to start; failures after
// New are delivery faults. A broker that cannot be reached (nothing
// listening, the dial timing out, the connection closed during the
// handshake or the login) is not an error: New warns on Config.Logger and returns a
// Transport that dials at each delivery until the broker is back (the
// deliveries fail as transient faults meanwhile); the exchange is then not
// checked.
func New(cfg Config) (*Transport, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	t := &Transport{cfg: cfg, slots: make(chan struct{}, cfg.Channels), dialing: make(chan struct{}, 1)}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancel()
	conn, err := t.dial(ctx)
	if err != nil && !refused(err) {
		cfg.Logger.Warn("rabbitmq: the broker cannot be reached; dialing again at each delivery until it is back",
			slog.String("error", err.Error()))
		return t, nil
	}
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: %w", err)
	}
	t.conn, t.block = conn, watchBlocked(conn)
	if cfg.Exchange != "" {
		ch, err := conn.Channel()
		if err == nil {
			err = ch.ExchangeDeclarePassive(cfg.Exchange, amqp.ExchangeDirect, false, false, false, false, nil)
			_ = ch.Close()
		}
		if err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("rabbitmq: Config.Exchange: exchange %q: %w", cfg.Exchange, err)
		}
	}
	return t, nil
}

// Close closes every channel and the connection. Deliver calls in flight
// fail; later ones return ErrClosed. Close is safe to call more than once.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	conn := t.conn
	t.conn, t.idle = nil, nil
	t.mu.Unlock()
	if conn == nil || conn.IsClosed() {
		return nil
	}
	// Closing the connection closes its channels, and fails the calls in
	// flight on it; the deadline bounds a broker that does not answer.
	if err := conn.CloseDeadline(time.Now().Add(t.cfg.Timeout)); err != nil && !errors.Is(err, amqp.ErrClosed) {
		return fmt.Errorf("rabbitmq: close: %w", err)
	}
	return nil
}

// routingKey returns the routing key of m.
func (t *Transport) routingKey(m *outbox.Message) string {
	if t.cfg.RoutingKeyFunc != nil {
		return t.cfg.RoutingKeyFunc(m)
	}
	if !strings.Contains(t.cfg.RoutingKey, "{") {
		return t.cfg.RoutingKey
	}
	// One pass: a field containing "{type}" is not expanded again.
	return strings.NewReplacer("{destination}", m.Destination, "{type}", m.Type,
		"{stream}", m.Stream, "{id}", m.ID.String()).Replace(t.cfg.RoutingKey)
}

// refused reports whether err, from dial, is the connection refused for
// good (credentials, the virtual host, no common SASL mechanism, a TLS
// handshake that cannot succeed as configured), as opposed to a broker
// that could not be reached. dial has confirmed a refused login
// (amqplogin).
func refused(err error) bool {
	if errors.Is(err, amqp.ErrCredentials) || errors.Is(err, amqp.ErrVhost) || errors.Is(err, amqp.ErrSASL) ||
		tlsfault.Refused(err) {
		return true
	}
	var e *amqp.Error
	return errors.As(err, &e) && e.Server && (e.Code == amqp.AccessRefused ||
		e.Code == amqp.NotAllowed && !strings.Contains(e.Reason, "limit"))
}
