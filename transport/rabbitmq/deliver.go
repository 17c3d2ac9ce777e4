package rabbitmq

import (
	"context"
	"fmt"
	"strconv"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/transport"
)

// maxShortString is the longest AMQP short string: routing keys, header
// names and the type property.
const maxShortString = 255

// Deliver publishes m and waits for the broker's confirm. It returns nil
// on a basic.ack for a message that was not returned as unroutable, and
// otherwise an error classified as the package documentation describes;
// when ctx is done the error wraps ctx.Err().
func (t *Transport) Deliver(ctx context.Context, m *outbox.Message) error {
	if err := ctx.Err(); err != nil {
		return classify(ctx, fmt.Errorf("rabbitmq: deliver %s: %w", m.ID, err))
	}
	key := t.routingKey(m)
	pub, err := t.publishing(m, key)
	if err != nil {
		return transport.Unsendable(fmt.Errorf("rabbitmq: message %s cannot be published: %w", m.ID, err), errorhandling.ReasonValidationFailure, "invalid_message")
	}
	failed := func(err error) error {
		return classify(ctx, fmt.Errorf("rabbitmq: publish %s to exchange %q with key %q: %w", m.ID, t.cfg.Exchange, key, err))
	}

	pctx, cancel := context.WithTimeout(ctx, t.cfg.Timeout)
	defer cancel()
	pc, err := t.acquire(pctx)
	if err != nil {
		return failed(err)
	}
	reuse := false
	defer func() { t.release(pc, reuse) }()
	if size, max := headerFrameSize(pub), pc.conn.Config.FrameSize; max > 0 && size > max {
		// The properties travel in one frame: the broker answers a larger
		// one by closing the connection (FRAME_ERROR), failing every
		// Deliver in flight on it, again at each retry.
		reuse = true
		return transport.Unsendable(fmt.Errorf("rabbitmq: message %s cannot be published: its headers and properties take a frame of %d bytes, over the broker's frame_max of %d",
			m.ID, size, max), errorhandling.ReasonValidationFailure, "invalid_message")
	}

	if err := pc.block.blocked(); err != nil {
		reuse = true
		return failed(err)
	}
	if err := transport.CheckSend(pctx); err != nil {
		reuse = true
		return fmt.Errorf("rabbitmq: deliver %s: %w", m.ID, err)
	}
	dc, err := t.publish(pctx, pc, key, pub)
	if err != nil {
		if cerr := closedWith(pc); cerr != nil {
			err = fmt.Errorf("%w: %w", err, cerr)
		}
		return failed(err)
	}
	select {
	case <-dc.Done():
	case <-pc.block.whenBlocked():
		// The broker blocked the connection as it took this publish: the
		// message may be enqueued once the alarm clears. The connection
		// is not silent, and tells when it is unblocked: it is kept.
		return failed(fmt.Errorf("waiting for the confirm: %w (the message may be enqueued once it clears)", pc.block.blocked()))
	case <-pctx.Done():
		// The channel has a confirm outstanding; release discards it.
		// When Timeout ran out (not the caller's context), the connection
		// is suspect too: one that went silent (a NAT or load balancer
		// dropped it without a reset) still takes writes, and its other
		// channels would each take the next Deliver to time out as well,
		// until the heartbeat notices (3 × 10 s). A broker that merely
		// confirms slower than Timeout loses the in-flight publishes of
		// that connection, which fail as transient faults and are sent
		// again.
		if ctx.Err() == nil {
			t.suspect(pc.conn)
		}
		return failed(fmt.Errorf("waiting for the confirm: %w", pctx.Err()))
	}
	if !dc.Acked() {
		if cerr := closedWith(pc); cerr != nil {
			// The broker closed the channel (404: no such exchange), which
			// nacks what was in flight.
			return failed(fmt.Errorf("channel closed: %w", cerr))
		}
		reuse = true
		return failed(nacked(len(pub.Body), t.room.largest(key)))
	}
	// A basic.return for the message arrives before its basic.ack.
	if r, ok := returned(pc, pub.MessageId); ok {
		reuse = true
		return failed(fmt.Errorf("%w: %s (%d)", ErrUnroutable, r.ReplyText, r.ReplyCode))
	}
	reuse = true
	t.room.confirmed(key, len(pub.Body))
	return nil
}

// publish sends pub on pc, bounded by ctx. The library checks ctx only
// before it writes, and a write blocks while the broker does not read (a
// memory or disk alarm blocks publishers); when ctx ends first, the
// connection is dropped, which frees the write.
func (t *Transport) publish(ctx context.Context, pc *pubChannel, key string, pub amqp.Publishing) (*amqp.DeferredConfirmation, error) {
	type sent struct {
		dc  *amqp.DeferredConfirmation
		err error
	}
	done := make(chan sent, 1)
	go func() {
		dc, err := pc.ch.PublishWithDeferredConfirmWithContext(ctx, t.cfg.Exchange, key, !t.cfg.AllowUnroutable, false, pub)
		done <- sent{dc, err}
	}()
	select {
	case s := <-done:
		return s.dc, s.err
	case <-pc.block.whenBlocked():
		return nil, fmt.Errorf("the broker did not take the message: %w (the message may be enqueued once it clears)", pc.block.blocked())
	case <-ctx.Done():
		t.suspect(pc.conn)
		return nil, fmt.Errorf("the broker did not take the message: %w", ctx.Err())
	}
}

// publishing builds the AMQP message of m, refusing what outbox
// validation refuses and what the protocol cannot carry, and dropping the
// reserved headers unless they are allowed.
func (t *Transport) publishing(m *outbox.Message, key string) (amqp.Publishing, error) {
	if err := m.ValidateLimits(t.cfg.Limits); err != nil {
		return amqp.Publishing{}, err
	}
	if len(key) > maxShortString {
		return amqp.Publishing{}, fmt.Errorf("routing key is %d bytes, longer than %d", len(key), maxShortString)
	}
	if len(m.Type) > maxShortString {
		return amqp.Publishing{}, fmt.Errorf("type is %d bytes, longer than %d", len(m.Type), maxShortString)
	}
	headers := make(amqp.Table, len(m.Headers)+4)
	for k, v := range m.Headers {
		if isBackstopHeader(k) || (!t.cfg.AllowReservedHeaders && IsReservedHeader(k)) {
			continue
		}
		if len(k) > maxShortString {
			return amqp.Publishing{}, fmt.Errorf("header name %.20q... is %d bytes, longer than %d", k, len(k), maxShortString)
		}
		headers[k] = v
	}
	id := m.ID.String()
	headers[HeaderMessageID] = id
	headers[HeaderType] = m.Type
	headers[HeaderAttempt] = strconv.Itoa(transport.Attempt(m))
	if m.Stream != "" {
		headers[HeaderStream] = m.Stream
	}
	mode := amqp.Persistent
	if t.cfg.NonPersistent {
		mode = amqp.Transient
	}
	return amqp.Publishing{
		Headers:      headers,
		DeliveryMode: mode,
		MessageId:    id,
		Type:         m.Type,
		Timestamp:    m.CreatedAt,
		AppId:        "backstop",
		Body:         m.Payload,
	}, nil
}

// headerFrameSize returns the size of the content header frame that
// carries pub's properties, as the library writes it for the properties
// publishing sets (string header values only): the frame's header and end
// (8 bytes), the class, weight, body size and flags (14), then each
// property present.
func headerFrameSize(pub amqp.Publishing) int {
	n := 8 + 14
	if len(pub.Headers) > 0 {
		n += 4 // the table's length
		for k, v := range pub.Headers {
			n += 1 + len(k) + 1 // short string name, value type
			if s, ok := v.(string); ok {
				n += 4 + len(s)
			} else {
				n += 9 // the largest fixed-size field
			}
		}
	}
	for _, s := range []string{pub.ContentType, pub.ContentEncoding, pub.CorrelationId, pub.ReplyTo,
		pub.Expiration, pub.MessageId, pub.Type, pub.UserId, pub.AppId} {
		if s != "" {
			n += 1 + len(s)
		}
	}
	if pub.DeliveryMode > 0 {
		n++
	}
	if pub.Priority > 0 {
		n++
	}
	if !pub.Timestamp.IsZero() {
		n += 8
	}
	return n
}

// nacked is the error of a message of a body of size bytes that the
// broker refused with basic.nack; took is the largest body its routing
// key took within the last hour, or -1. A nack carries no reason, and
// AMQP 0-9-1 has no way to read a queue's arguments. A body no larger
// than one the key took is not over a queue's x-max-length-bytes: a
// queue refused it for lack of room (errQueueFull). Otherwise the error
// names the usual causes and the size, which is what x-max-length-bytes
// counts: a queue refuses for good a message larger than that limit.
func nacked(size, took int) error {
	if size <= took {
		return fmt.Errorf("%w: %w: it took a %d-byte body on this routing key within the last hour, and this one has %d",
			ErrNacked, errQueueFull, took, size)
	}
	return fmt.Errorf("%w: a queue it routes to refused it, full with x-overflow reject-publish, or smaller than the message "+
		"(a %d-byte body, which x-max-length-bytes counts), or the broker could not store it", ErrNacked, size)
}

// closedWith returns the error the channel was closed with, or nil while
// it is open. The close listener is told before pending confirms are
// nacked, so after a nack it is reliable.
func closedWith(pc *pubChannel) *amqp.Error {
	select {
	case e, ok := <-pc.closes:
		if ok && e != nil {
			return e
		}
		return amqp.ErrClosed
	default:
	}
	if pc.healthy() {
		return nil
	}
	return amqp.ErrClosed
}

// returned drains the returns received on pc and reports the one for the
// message id, if any. Returns of other ids (a publish given up on) are
// dropped. The library closes the returns of a channel that closes (the
// connection closed after the confirm), once those received are read.
func returned(pc *pubChannel, id string) (amqp.Return, bool) {
	var found amqp.Return
	ok := false
	for {
		select {
		case r, open := <-pc.returns:
			if !open {
				// A closed channel receives at once: reading on spun the
				// Deliver for good, at full CPU, holding its worker.
				return found, ok
			}
			if r.MessageId == id {
				found, ok = r, true
			}
		default:
			return found, ok
		}
	}
}
