// Package rabbitinbox receives messages from a RabbitMQ queue into an
// inbox (package inbox), acknowledging each only once it is stored.
//
// The message id, the inbox's de-duplication key, is the AMQP message-id
// property, which Backstop's RabbitMQ transport sets to the outbox
// message id; a message without one cannot be de-duplicated and is
// rejected (to the queue's dead-letter exchange, if it has one). The type
// is the type property, else the Backstop-Type header, else the routing
// key; the ordering key the Backstop-Stream header. String-valued headers
// are kept under their canonical HTTP spelling (traceparent and tracestate
// in lower case, their W3C names; a malformed traceparent is left out),
// except the ones RabbitMQ
// reserves, Backstop's own and those a message cannot carry (a name that
// is not an HTTP token, a value with a control character, a second
// spelling of one name), which are left out with a warning; the
// content-type property is kept as Content-Type.
//
// Each delivery is stored, then acknowledged: a redelivery after a lost
// acknowledgement, a closed channel or a crash is recognised and dropped.
// A Receiver given a URL (Config.URL) dials the broker itself and, when
// the connection or the channel closes under it (a broker restart,
// rabbitmqctl close_connection, the network), dials again with a capped
// backoff and consumes again: the deliveries left unacknowledged on the
// old channel come back from the broker and are dropped as duplicates
// when they were stored.
// A delivery the inbox cannot store at the moment (its database is down)
// is held and tried again every Config.RetryDelay until it is stored, so
// that the outage does not count against a quorum queue's
// x-delivery-limit (the broker's consumer_timeout, 30 min by default,
// still closes a channel that holds a delivery that long: the delivery
// then comes again); one it can never store (ErrInvalid) is rejected
// without requeue. With Config.Prefetch 1 (the
// default) the queue's order is the order the rows are written in.
//
// A stream queue (x-queue-type stream) keeps its messages, and a consumer
// that does not say where to start gets only those published after it
// started. The receiver says: it starts at the message after the last it
// handled, which it saves in the inbox's store every second as its cursor
// (source "rabbitmq:<queue>"), so that a program started again resumes
// there, whether it was stopped for a minute or a month, and reads again
// at most the last second before a crash (dropped as duplicates). A
// receiver with no cursor saved yet (new, or on a store that keeps none)
// starts at the stream's last DedupWindow less a tenth of it (at most an
// hour), by the broker's clock, and the inbox drops what it had received
// already as duplicates. A stream queue deleted and declared again numbers
// its messages from 0 again: stop the receiver and delete its cursor (the
// row of table inbox_cursors for source rabbitmq:<queue>) before it starts
// again, or it resumes past the new stream's end.
package rabbitinbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/backstophq/backstop/inbox"
	"github.com/backstophq/backstop/inbox/internal/headers"
	"github.com/backstophq/backstop/inbox/internal/keep"
	"github.com/backstophq/backstop/inbox/internal/liveness"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/transport/rabbitmq"
)

// The headers read besides the properties: those Backstop's RabbitMQ
// transport sets.
const (
	HeaderType   = rabbitmq.HeaderType
	HeaderStream = rabbitmq.HeaderStream
)

// Defaults applied by New to zero Config fields.
const (
	// DefaultRetryDelay is how long the receiver waits before it tries
	// again to store a delivery the inbox could not store.
	DefaultRetryDelay = time.Second
	// DefaultReconnectDelay is the first wait before dialing again after
	// the connection was lost; it doubles up to DefaultMaxReconnectDelay.
	DefaultReconnectDelay    = 100 * time.Millisecond
	DefaultMaxReconnectDelay = 30 * time.Second
)

// maxPrefetch is the largest prefetch count basic.qos carries.
const maxPrefetch = 65535

// defaultHeartbeat is amqp.Dial's heartbeat interval.
const defaultHeartbeat = 10 * time.Second

// Config configures a Receiver.
type Config struct {
	// Inbox is where messages go. Required.
	Inbox *inbox.Inbox
	// URL is the broker's address (amqp:// or amqps://): Run dials it,
	// and dials it again whenever the connection or the channel closes
	// under it. One of URL and Conn is required.
	URL string
	// AMQP configures the connections dialed to URL (TLS, heartbeat,
	// properties). A zero Heartbeat means 10 s, as amqp.Dial's: a
	// connection whose peer went silent is found dead within two.
	AMQP amqp.Config
	// Conn is a broker connection the caller owns, to consume on instead
	// of dialing URL. Run opens a new channel on it when the channel
	// closes, but returns an error once Conn itself is closed: reconnecting
	// is the caller's then. One of URL and Conn is required.
	Conn *amqp.Connection
	// Queue is the queue to consume, which must exist. Required.
	Queue string
	// Prefetch is the most deliveries the broker sends ahead of their
	// acknowledgement, at most 65535. Zero means 1, which keeps the
	// queue's order.
	Prefetch int
	// RetryDelay is how long the receiver waits before it tries again to
	// store a delivery the inbox could not store at the moment; it holds
	// the delivery meanwhile. Zero means DefaultRetryDelay.
	RetryDelay time.Duration
	// ReconnectDelay is the first wait before consuming again after the
	// connection or the channel was lost; each failed try doubles it, up
	// to MaxReconnectDelay, and a session whose consumer started resets
	// it. Zero means DefaultReconnectDelay (100 ms).
	ReconnectDelay time.Duration
	// MaxReconnectDelay caps the wait between tries. Zero means
	// DefaultMaxReconnectDelay (30 s).
	MaxReconnectDelay time.Duration
	// StreamKey, when set, returns a delivery's ordering key instead of
	// its Backstop-Stream header (such as another header, or the routing
	// key); "" means no ordering.
	StreamKey func(d *amqp.Delivery) string
	// Logger receives the receiver's records. Nil means slog.Default().
	Logger *slog.Logger
}

// Receiver consumes a queue into an inbox.
type Receiver struct {
	cfg Config
	log *slog.Logger

	// Test hooks: afterStore runs once a delivery is stored (or found a
	// duplicate), before it is acknowledged; ack, when set, decides
	// whether to acknowledge it (false: nack with requeue); consuming
	// runs when a session's consumer has started, reconnecting after the
	// wait before the next session.
	afterStore   func(d *amqp.Delivery)
	ack          func(d *amqp.Delivery) bool
	consuming    func()
	reconnecting func()

	// state is what Consuming reports.
	state liveness.State

	// On a stream queue: nextOffset is the offset after the last delivery
	// handled (0: none yet); notStream is set once the broker refused a
	// start offset, the queue being of another type (streamStart).
	nextOffset atomic.Int64
	notStream  atomic.Bool
	// cursorLoaded is set once the saved cursor was read (loadCursor);
	// savedOffset is the offset last saved or read (saveCursor).
	cursorLoaded atomic.Bool
	savedOffset  atomic.Int64
}

// errNotStarted is Consuming's answer before Run's first consumer starts.
var errNotStarted = errors.New("rabbitinbox: not consuming yet")

// Consuming reports whether the receiver has a consumer on its queue now,
// and when it has not, why: the error that ended the last session (the
// connection lost, the queue deleted), or that none has started yet. For
// readiness checks and status pages.
func (r *Receiver) Consuming() (bool, error) {
	return r.state.Get(errNotStarted)
}

// setConsuming records what Consuming reports.
func (r *Receiver) setConsuming(live bool, why error) {
	r.state.Set(live, why)
}

// New returns a Receiver; the error names a missing or bad field.
func New(cfg Config) (*Receiver, error) {
	switch {
	case cfg.Inbox == nil:
		return nil, errors.New("rabbitinbox: Config.Inbox is required")
	case cfg.Conn == nil && cfg.URL == "":
		return nil, errors.New("rabbitinbox: Config.URL or Config.Conn is required")
	case cfg.Conn != nil && cfg.URL != "":
		return nil, errors.New("rabbitinbox: Config.URL and Config.Conn are exclusive: give one")
	case cfg.Queue == "":
		return nil, errors.New("rabbitinbox: Config.Queue is required")
	case cfg.Prefetch < 0:
		return nil, fmt.Errorf("rabbitinbox: Config.Prefetch must not be negative, got %d", cfg.Prefetch)
	case cfg.Prefetch > maxPrefetch:
		// basic.qos carries it as a short, which the library truncates:
		// 65536 would reach the broker as 0, no limit at all.
		return nil, fmt.Errorf("rabbitinbox: Config.Prefetch must be at most %d (an AMQP short), got %d", maxPrefetch, cfg.Prefetch)
	case cfg.RetryDelay < 0:
		return nil, fmt.Errorf("rabbitinbox: Config.RetryDelay must not be negative, got %s", cfg.RetryDelay)
	case cfg.ReconnectDelay < 0:
		return nil, fmt.Errorf("rabbitinbox: Config.ReconnectDelay must not be negative, got %s", cfg.ReconnectDelay)
	case cfg.MaxReconnectDelay < 0:
		return nil, fmt.Errorf("rabbitinbox: Config.MaxReconnectDelay must not be negative, got %s", cfg.MaxReconnectDelay)
	}
	if cfg.ReconnectDelay == 0 {
		cfg.ReconnectDelay = DefaultReconnectDelay
	}
	if cfg.MaxReconnectDelay == 0 {
		cfg.MaxReconnectDelay = DefaultMaxReconnectDelay
	}
	if cfg.MaxReconnectDelay < cfg.ReconnectDelay {
		return nil, fmt.Errorf("rabbitinbox: Config.MaxReconnectDelay %s is less than ReconnectDelay %s", cfg.MaxReconnectDelay, cfg.ReconnectDelay)
	}
	if cfg.Prefetch == 0 {
		cfg.Prefetch = 1
	}
	if cfg.AMQP.Heartbeat == 0 {
		cfg.AMQP.Heartbeat = defaultHeartbeat
	}
	if cfg.RetryDelay == 0 {
		cfg.RetryDelay = DefaultRetryDelay
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Receiver{cfg: cfg, log: cfg.Logger.With(slog.String("inbox", cfg.Inbox.Name()), slog.String("source", "amqp"))}, nil
}

// receive stores d and acknowledges it, or gives it back.
func (r *Receiver) receive(ctx context.Context, d *amqp.Delivery) {
	// A delivery without a message-id is refused by Receive, and counted.
	msg, dropped := received(d, r.cfg.Inbox.Limits())
	if len(dropped) > 0 {
		r.log.LogAttrs(ctx, slog.LevelWarn, "headers left out: a message cannot carry them",
			slog.String("routing_key", d.RoutingKey), slog.String("message_id", outbox.CleanText(d.MessageId, 100)),
			slog.Any("headers", headers.CleanNames(dropped)))
	}
	if r.cfg.StreamKey != nil {
		msg.Stream = r.cfg.StreamKey(d)
	}
	err := r.store(ctx, d, msg)
	switch {
	case errors.Is(err, inbox.ErrInvalid):
		r.log.LogAttrs(ctx, slog.LevelWarn, "message rejected: it cannot be stored",
			slog.String("routing_key", d.RoutingKey), slog.String("error", err.Error()))
		r.handled(d)
		_ = d.Reject(false)
		return
	case err != nil:
		// Stopped before it could store it: back to the queue.
		_ = d.Nack(false, true)
		return
	}
	if r.afterStore != nil {
		r.afterStore(d)
	}
	if r.ack != nil && !r.ack(d) {
		_ = d.Nack(false, true)
		return
	}
	r.handled(d)
	if err := d.Ack(false); err != nil {
		// The delivery goes back to the queue when the channel closes,
		// and is dropped as a duplicate.
		r.log.LogAttrs(ctx, slog.LevelDebug, "ack failed", slog.String("error", err.Error()))
	}
}

// store stores msg, the inbox's form of d. While the inbox cannot store
// it at the moment (its database is down), it tries again every
// RetryDelay and keeps d meanwhile: giving it back would count as a
// delivery on a quorum queue, which drops (or dead-letters) a message
// past its x-delivery-limit. It returns nil, an error matching
// inbox.ErrInvalid, or the last error once ctx is done.
func (r *Receiver) store(ctx context.Context, d *amqp.Delivery, msg inbox.Received) error {
	return keep.Store(ctx, r.cfg.Inbox, msg, r.cfg.RetryDelay, r.log, slog.String("routing_key", d.RoutingKey), nil, 0)
}

// received maps a delivery to the inbox's form, and names the headers it
// left out.
//
// AMQP headers are a table any publisher fills: a name with a space, a
// value with a line break (a stack trace a framework adds), two names that
// differ only in case. The message keeps the string-valued headers it can
// carry, under their canonical HTTP spelling (the first in name order
// wins a collision; the content-type property wins over a header), and
// leaves out the others, so that one header no handler reads does not
// refuse the whole message (rejected without requeue, it is gone unless
// the queue has a dead-letter exchange).
func received(d *amqp.Delivery, limits outbox.Limits) (inbox.Received, []string) {
	typ := d.Type
	if typ == "" {
		typ = stringHeader(d.Headers, HeaderType)
	}
	if typ == "" {
		typ = d.RoutingKey
	}
	kept := headers.Within(limits)
	// The content-type property is kept as the Content-Type header (the
	// table's content-type is then a second of the name), unless the
	// message cannot carry it (a control character, invalid UTF-8): then
	// it is left out like any such header, and a valid content-type table
	// header may stand in for it.
	if ct := d.ContentType; ct != "" {
		if outbox.CheckHeader("Content-Type", ct) != nil {
			kept.Dropped = append(kept.Dropped, "content-type (property)")
		} else {
			kept.Add("Content-Type", ct)
		}
	}
	names := make([]string, 0, len(d.Headers))
	for k := range d.Headers {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		if s, ok := d.Headers[k].(string); ok && !rabbitmq.IsReservedHeader(k) && !headers.HasPrefixFold(k, "backstop-") {
			kept.Add(k, s)
		}
	}
	return inbox.Received{
		ID: d.MessageId, Type: typ, Stream: stringHeader(d.Headers, HeaderStream),
		Payload: d.Body, Headers: kept.Headers, Source: "amqp",
	}, kept.Dropped
}

func stringHeader(t amqp.Table, name string) string {
	s, _ := t[name].(string)
	return s
}
