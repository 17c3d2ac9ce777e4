package rabbitinbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/backstophq/backstop/inbox/internal/resume"
	"github.com/backstophq/backstop/internal/amqplogin"
	"github.com/backstophq/backstop/transport/rabbitmq"
)

// ErrConnClosed is matched by Run's error when the caller's Config.Conn
// closed: a Receiver given a URL dials again instead.
var ErrConnClosed = errors.New("rabbitinbox: connection closed")

// Run consumes the queue until ctx is done, then returns nil. A first
// session that cannot start for a reason no retry cures (IsPermanent: the
// queue missing, credentials or the virtual host refused, a bad URL) is
// an error, so that a mistake in the configuration shows at once; one
// that cannot start because the broker is unreachable or went away is
// tried again like any later one, so that a broker down when the receiver
// starts is consumed once it is back. When the channel or the connection
// closes under it, or a session cannot start, Run consumes again after
// ReconnectDelay, doubling up to MaxReconnectDelay while the tries fail,
// with one warning for the outage (the tries after it are logged at debug
// level) and a record at info level once it consumes again; Consuming
// says meanwhile why it does not. The unacknowledged deliveries go back
// to the queue and come again. With Config.Conn, Run returns an error matching
// ErrConnClosed once that connection is closed.
func (r *Receiver) Run(ctx context.Context) error {
	return resume.Run(ctx, resume.Config{
		Delay: r.cfg.ReconnectDelay, MaxDelay: r.cfg.MaxReconnectDelay,
		Log: r.log, Message: "not consuming the queue; trying again", Attrs: []slog.Attr{slog.String("queue", r.cfg.Queue)},
		Fatal:     func(err error) bool { return errors.Is(err, ErrConnClosed) },
		Permanent: IsPermanent,
		Retrying:  r.reconnecting,
	}, r.session)
}

// session consumes on one connection (dialed for it unless the caller
// owns one) and one channel until either closes or ctx is done, calling
// up once its consumer started. It reports whether its consumer started,
// and why it ended.
func (r *Receiver) session(ctx context.Context, up func()) (started bool, err error) {
	defer func() {
		why := err
		if why == nil {
			why = errors.New("rabbitinbox: stopped")
		}
		r.setConsuming(false, why)
	}()
	conn := r.cfg.Conn
	if conn == nil {
		// A login cut short reads as refused credentials, which stop a
		// first session: a second login tells them apart.
		conn, err = amqplogin.Dial(func() (*amqp.Connection, error) { return amqp.DialConfig(r.cfg.URL, r.cfg.AMQP) })
		if err != nil {
			if ue := (*url.Error)(nil); errors.As(err, &ue) {
				return false, &permanentError{fmt.Errorf("rabbitinbox: dial: Config.URL is %w", rabbitmq.WithoutURL(err))}
			}
			return false, fmt.Errorf("rabbitinbox: dial: %w", err)
		}
		defer conn.Close()
	} else if conn.IsClosed() {
		return false, ErrConnClosed
	}
	ch, closed, deliveries, err := r.consume(ctx, conn)
	if ch != nil {
		defer closeChannel(ch)
	}
	if err != nil {
		return false, err
	}
	// The cursor is saved every cursorSaveEvery and as the session ends.
	defer r.saveCursor(context.WithoutCancel(ctx))
	saveTick := time.NewTicker(cursorSaveEvery)
	defer saveTick.Stop()
	r.setConsuming(true, nil)
	up()
	if r.consuming != nil {
		r.consuming()
	}
	started = true
	for {
		select {
		case <-ctx.Done():
			return true, nil
		case <-saveTick.C:
			r.saveCursor(ctx)
		case d, ok := <-deliveries:
			if !ok {
				// A closed channel has said so on closed before its
				// deliveries end. A consumer the broker cancelled (its queue
				// deleted) leaves the channel open and closed empty: waiting
				// on it would hold the receiver for good.
				err := errors.New("rabbitinbox: the broker cancelled the consumer")
				select {
				case e := <-closed:
					if e != nil {
						err = fmt.Errorf("rabbitinbox: channel closed: %w", e)
					}
				default:
				}
				if r.cfg.Conn != nil && conn.IsClosed() {
					err = fmt.Errorf("%w: %w", ErrConnClosed, err)
				}
				return true, err
			}
			r.receive(ctx, &d)
		}
	}
}

// consume opens a channel on conn and starts the session's consumer on
// it. On a stream queue it asks for the message after the last one the
// receiver handled, or, at the receiver's first session, for the recent
// messages that streamStart describes; a queue of another type refuses
// that argument, closing the channel, and is consumed again without it.
// ch, when not nil, is for the caller to close.
func (r *Receiver) consume(ctx context.Context, conn *amqp.Connection) (ch *amqp.Channel, closed chan *amqp.Error, deliveries <-chan amqp.Delivery, err error) {
	if err := r.loadCursor(ctx); err != nil {
		// Without its cursor a stream queue's consumer cannot start where
		// the receiver was; any other queue's can.
		stream, perr := r.isStream(conn)
		switch {
		case perr != nil:
			return nil, nil, nil, perr
		case stream:
			return nil, nil, nil, err
		}
	}
	for {
		args := r.streamStart()
		if ch, err = conn.Channel(); err != nil {
			if conn.IsClosed() && r.cfg.Conn != nil {
				return nil, nil, nil, fmt.Errorf("%w: open channel: %w", ErrConnClosed, err)
			}
			return nil, nil, nil, fmt.Errorf("rabbitinbox: open channel: %w", err)
		}
		if err := ch.Qos(r.cfg.Prefetch, 0, false); err != nil {
			return ch, nil, nil, fmt.Errorf("rabbitinbox: qos: %w", err)
		}
		// Closing the channel when the session ends cancels the consumer and
		// gives the unacknowledged deliveries back to the queue.
		closed = ch.NotifyClose(make(chan *amqp.Error, 1))
		deliveries, err = ch.Consume(r.cfg.Queue, "", false, false, false, false, args)
		if err == nil {
			return ch, closed, deliveries, nil
		}
		if args == nil || !refusesStreamOffset(err) {
			return ch, nil, nil, fmt.Errorf("rabbitinbox: consume %q: %w", r.cfg.Queue, err)
		}
		r.notStream.Store(true)
		closeChannel(ch)
	}
}

// isStream finds out whether the queue is a stream queue, on a channel of
// its own, by asking for a consumer that starts at the stream's next
// message, which a queue of another type refuses (then notStream is set).
// A consumer started is cancelled at once: it acknowledges nothing, and a
// stream queue keeps its messages for whoever reads them.
func (r *Receiver) isStream(conn *amqp.Connection) (bool, error) {
	ch, err := conn.Channel()
	if err != nil {
		return false, fmt.Errorf("rabbitinbox: open channel: %w", err)
	}
	defer closeChannel(ch)
	if err := ch.Qos(1, 0, false); err != nil {
		return false, fmt.Errorf("rabbitinbox: qos: %w", err)
	}
	_, err = ch.Consume(r.cfg.Queue, "", false, false, false, false, amqp.Table{streamOffsetArg: "next"})
	switch {
	case err == nil:
		return true, nil
	case refusesStreamOffset(err):
		r.notStream.Store(true)
		return false, nil
	}
	return false, fmt.Errorf("rabbitinbox: consume %q: %w", r.cfg.Queue, err)
}

// refusesStreamOffset reports whether err is a broker's refusal of a
// start offset for a queue that is not a stream queue.
func refusesStreamOffset(err error) bool {
	var e *amqp.Error
	return errors.As(err, &e) && e.Code == amqp.PreconditionFailed && strings.Contains(e.Reason, streamOffsetArg)
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
