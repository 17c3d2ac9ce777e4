// Package rabbitinbox receives messages from a RabbitMQ queue into an
// inbox (package inbox), acknowledging each only once it is stored.
//
// The message id, the inbox's de-duplication key, is the AMQP message-id
// property, which Backstop's RabbitMQ transport sets to the outbox
// message id; a message without one cannot be de-duplicated and is
// rejected (to the queue's dead-letter exchange, if it has one). The type
// is the type property, else the Backstop-Type header, else the routing
// key; the ordering key the Backstop-Stream header. String-valued headers
// are kept, except the ones RabbitMQ reserves and Backstop's own, and the
// content-type property as Content-Type.
//
// Each delivery is stored, then acknowledged: a redelivery after a lost
// acknowledgement, a closed channel or a crash is recognised and dropped.
// A delivery the inbox cannot store at the moment is given back
// (nack, requeue) after Config.RetryDelay; one it can never store
// (ErrInvalid) is rejected without requeue. With Config.Prefetch 1 (the
// default) the queue's order is the order the rows are written in.
package rabbitinbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/backstophq/backstop/inbox"
	"github.com/backstophq/backstop/transport/rabbitmq"
)

// The headers read besides the properties: those Backstop's RabbitMQ
// transport sets.
const (
	HeaderType   = rabbitmq.HeaderType
	HeaderStream = rabbitmq.HeaderStream
)

// DefaultRetryDelay is how long a delivery the inbox could not store is
// held before it is given back, when Config.RetryDelay is zero.
const DefaultRetryDelay = time.Second

// Config configures a Receiver.
type Config struct {
	// Inbox is where messages go. Required.
	Inbox *inbox.Inbox
	// Conn is the broker connection to consume on; the caller owns it.
	// Required.
	Conn *amqp.Connection
	// Queue is the queue to consume, which must exist. Required.
	Queue string
	// Prefetch is the most deliveries the broker sends ahead of their
	// acknowledgement. Zero means 1, which keeps the queue's order.
	Prefetch int
	// RetryDelay is how long a delivery the inbox could not store is held
	// before it is given back to the queue. Zero means
	// DefaultRetryDelay.
	RetryDelay time.Duration
	// Logger receives the receiver's records. Nil means slog.Default().
	Logger *slog.Logger
}

// Receiver consumes a queue into an inbox.
type Receiver struct {
	cfg Config
	log *slog.Logger

	// Test hooks: afterStore runs once a delivery is stored (or found a
	// duplicate), before it is acknowledged; ack, when set, decides
	// whether to acknowledge it (false: nack with requeue).
	afterStore func(d *amqp.Delivery)
	ack        func(d *amqp.Delivery) bool
}

// New returns a Receiver; the error names a missing or bad field.
func New(cfg Config) (*Receiver, error) {
	switch {
	case cfg.Inbox == nil:
		return nil, errors.New("rabbitinbox: Config.Inbox is required")
	case cfg.Conn == nil:
		return nil, errors.New("rabbitinbox: Config.Conn is required")
	case cfg.Queue == "":
		return nil, errors.New("rabbitinbox: Config.Queue is required")
	case cfg.Prefetch < 0:
		return nil, fmt.Errorf("rabbitinbox: Config.Prefetch must not be negative, got %d", cfg.Prefetch)
	case cfg.RetryDelay < 0:
		return nil, fmt.Errorf("rabbitinbox: Config.RetryDelay must not be negative, got %s", cfg.RetryDelay)
	}
	if cfg.Prefetch == 0 {
		cfg.Prefetch = 1
	}
	if cfg.RetryDelay == 0 {
		cfg.RetryDelay = DefaultRetryDelay
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Receiver{cfg: cfg, log: cfg.Logger.With(slog.String("inbox", cfg.Inbox.Name()), slog.String("source", "amqp"))}, nil
}

// Run consumes the queue until ctx is done, then returns nil. It returns
// an error when the channel or the connection closes under it; the
// unacknowledged deliveries go back to the queue, and a new Run (on a new
// connection if need be) takes them again.
func (r *Receiver) Run(ctx context.Context) error {
	ch, err := r.cfg.Conn.Channel()
	if err != nil {
		return fmt.Errorf("rabbitinbox: open channel: %w", err)
	}
	defer closeChannel(ch)
	if err := ch.Qos(r.cfg.Prefetch, 0, false); err != nil {
		return fmt.Errorf("rabbitinbox: qos: %w", err)
	}
	// Closing the channel when Run ends cancels the consumer and gives
	// the unacknowledged deliveries back to the queue.
	deliveries, err := ch.Consume(r.cfg.Queue, "", false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("rabbitinbox: consume %q: %w", r.cfg.Queue, err)
	}
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	for {
		select {
		case <-ctx.Done():
			return nil
		case d, ok := <-deliveries:
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				if e := <-closed; e != nil {
					return fmt.Errorf("rabbitinbox: channel closed: %w", e)
				}
				return errors.New("rabbitinbox: the broker cancelled the consumer")
			}
			r.receive(ctx, &d)
		}
	}
}

// closeTimeout bounds the wait for the broker's answer to a channel close.
const closeTimeout = 5 * time.Second

// closeChannel closes ch, waiting at most closeTimeout for the broker
// (a broker that does not answer must not hold Run).
func closeChannel(ch *amqp.Channel) {
	done := make(chan struct{})
	go func() {
		_ = ch.Close()
		close(done)
	}()
	t := time.NewTimer(closeTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// receive stores d and acknowledges it, or gives it back.
func (r *Receiver) receive(ctx context.Context, d *amqp.Delivery) {
	// A delivery without a message-id is refused by Receive, and counted.
	_, err := r.cfg.Inbox.Receive(ctx, received(d))
	switch {
	case errors.Is(err, inbox.ErrInvalid):
		r.log.LogAttrs(ctx, slog.LevelWarn, "message rejected: it cannot be stored",
			slog.String("routing_key", d.RoutingKey), slog.String("error", err.Error()))
		_ = d.Reject(false)
		return
	case err != nil:
		r.log.LogAttrs(ctx, slog.LevelWarn, "cannot store a received message; it goes back to the queue",
			slog.String("routing_key", d.RoutingKey), slog.String("error", err.Error()))
		t := time.NewTimer(r.cfg.RetryDelay)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
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
	if err := d.Ack(false); err != nil {
		// The delivery goes back to the queue when the channel closes,
		// and is dropped as a duplicate.
		r.log.LogAttrs(ctx, slog.LevelDebug, "ack failed", slog.String("error", err.Error()))
	}
}

// received maps a delivery to the inbox's form.
func received(d *amqp.Delivery) inbox.Received {
	typ := d.Type
	if typ == "" {
		typ = stringHeader(d.Headers, HeaderType)
	}
	if typ == "" {
		typ = d.RoutingKey
	}
	var headers map[string]string
	for k, v := range d.Headers {
		s, ok := v.(string)
		if !ok || rabbitmq.IsReservedHeader(k) || hasPrefixFold(k, "backstop-") {
			continue
		}
		if headers == nil {
			headers = map[string]string{}
		}
		headers[k] = s
	}
	if d.ContentType != "" {
		if headers == nil {
			headers = map[string]string{}
		}
		headers["Content-Type"] = d.ContentType
	}
	return inbox.Received{
		ID: d.MessageId, Type: typ, Stream: stringHeader(d.Headers, HeaderStream),
		Payload: d.Body, Headers: headers, Source: "amqp",
	}
}

func stringHeader(t amqp.Table, name string) string {
	s, _ := t[name].(string)
	return s
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}
