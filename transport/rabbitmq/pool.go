package rabbitmq

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/backstophq/backstop/internal/amqplogin"
)

// pubChannel is a channel in confirm mode with its own return and close
// listeners. One Deliver at a time uses it.
type pubChannel struct {
	conn    *amqp.Connection
	ch      *amqp.Channel
	returns chan amqp.Return // basic.return, which precedes the message's confirm
	closes  chan *amqp.Error // why the broker closed the channel, if it did
	block   *blocking        // whether the broker blocks conn
}

// healthy reports whether pc can take another publish.
func (pc *pubChannel) healthy() bool {
	return !pc.ch.IsClosed() && !pc.conn.IsClosed()
}

// acquire waits for a free slot and returns a channel ready to publish,
// opening one (and dialing the broker) when no idle one is usable. The
// caller hands it back with release.
func (t *Transport) acquire(ctx context.Context) (*pubChannel, error) {
	select {
	case t.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for a free channel: %w", ctx.Err())
	}
	pc, err := t.take(ctx)
	if err != nil {
		<-t.slots
		return nil, err
	}
	return pc, nil
}

// release returns pc to the pool when reuse is true and it is still open,
// and closes it otherwise; then it frees the caller's slot.
func (t *Transport) release(pc *pubChannel, reuse bool) {
	defer func() { <-t.slots }()
	if reuse && pc.healthy() {
		t.mu.Lock()
		if !t.closed && pc.conn == t.conn {
			t.idle = append(t.idle, pc)
			t.mu.Unlock()
			return
		}
		t.mu.Unlock()
	}
	if !pc.ch.IsClosed() {
		// Closing waits for the broker's close-ok; a Deliver must not.
		go func() { _ = pc.ch.Close() }()
	}
}

// take pops a usable idle channel or opens a new one, dialing the broker
// first when there is no open connection. Every call to the broker is
// bounded by ctx, and made without t.mu held.
func (t *Transport) take(ctx context.Context) (*pubChannel, error) {
	conn, block, pc, err := t.popIdle()
	if err != nil || pc != nil {
		return pc, err
	}
	if conn == nil || conn.IsClosed() {
		if conn, block, err = t.connect(ctx); err != nil {
			return nil, err
		}
	}
	if err := block.blocked(); err != nil {
		return nil, err
	}
	return t.open(ctx, conn, block)
}

// popIdle returns a usable idle channel, or else the current connection
// and its blocking state.
func (t *Transport) popIdle() (*amqp.Connection, *blocking, *pubChannel, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, nil, nil, ErrClosed
	}
	for len(t.idle) > 0 {
		pc := t.idle[len(t.idle)-1]
		t.idle = t.idle[:len(t.idle)-1]
		if pc.healthy() {
			return nil, nil, pc, nil
		}
	}
	return t.conn, t.block, nil, nil
}

// connect dials the broker, one dial at a time: a caller that waited for
// another's dial takes its connection.
func (t *Transport) connect(ctx context.Context) (*amqp.Connection, *blocking, error) {
	select {
	case t.dialing <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, fmt.Errorf("waiting for the broker's connection: %w", ctx.Err())
	}
	defer func() { <-t.dialing }()
	t.mu.Lock()
	conn, block, closed := t.conn, t.block, t.closed
	t.mu.Unlock()
	if closed {
		return nil, nil, ErrClosed
	}
	if conn != nil && !conn.IsClosed() {
		return conn, block, nil
	}
	conn, err := t.dial(ctx)
	if err != nil {
		return nil, nil, err
	}
	block = watchBlocked(conn)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		go func() { _ = conn.Close() }()
		return nil, nil, ErrClosed
	}
	t.conn, t.block, t.idle = conn, block, nil
	return conn, block, nil
}

// open opens a channel in confirm mode on conn. When the broker does not
// answer before ctx ends, the connection is dropped (suspect): the next
// Deliver dials again, and calls blocked on it are freed.
func (t *Transport) open(ctx context.Context, conn *amqp.Connection, block *blocking) (*pubChannel, error) {
	type opened struct {
		ch  *amqp.Channel
		err error
	}
	done := make(chan opened, 1)
	go func() {
		ch, err := conn.Channel()
		if err != nil {
			done <- opened{nil, fmt.Errorf("open channel: %w", err)}
			return
		}
		if err := ch.Confirm(false); err != nil {
			_ = ch.Close()
			done <- opened{nil, fmt.Errorf("enable publisher confirms: %w", err)}
			return
		}
		done <- opened{ch, nil}
	}()
	select {
	case o := <-done:
		if o.err != nil {
			return nil, o.err
		}
		return &pubChannel{
			conn:    conn,
			ch:      o.ch,
			returns: o.ch.NotifyReturn(make(chan amqp.Return, 4)),
			closes:  o.ch.NotifyClose(make(chan *amqp.Error, 1)),
			block:   block,
		}, nil
	case <-block.whenBlocked():
		go func() {
			if o := <-done; o.ch != nil {
				_ = o.ch.Close()
			}
		}()
		return nil, fmt.Errorf("open channel: %w", block.blocked())
	case <-ctx.Done():
		t.suspect(conn)
		go func() {
			if o := <-done; o.ch != nil {
				_ = o.ch.Close()
			}
		}()
		return nil, fmt.Errorf("open channel: the broker did not answer: %w", ctx.Err())
	}
}

// suspect drops conn, which stopped answering: it is no longer handed
// out, and it is closed at once (a deadline in the past), which fails the
// writes blocked on it instead of leaving them until the broker reads.
func (t *Transport) suspect(conn *amqp.Connection) {
	t.mu.Lock()
	if t.conn == conn {
		t.conn, t.block, t.idle = nil, nil, nil
	}
	t.mu.Unlock()
	go func() { _ = conn.CloseDeadline(time.Now()) }()
}

// dial connects to the broker, giving up when ctx is done or after
// Config.Timeout, whichever comes first.
func (t *Transport) dial(ctx context.Context) (*amqp.Connection, error) {
	deadline := time.Now().Add(t.cfg.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName("backstop")
	cfg := amqp.Config{
		Heartbeat:  10 * time.Second,
		Properties: props,
		Dial: func(network, addr string) (net.Conn, error) {
			dctx, cancel := context.WithDeadline(ctx, deadline)
			defer cancel()
			c, err := (&net.Dialer{}).DialContext(dctx, network, addr)
			if err != nil {
				return nil, err
			}
			// Bounds the TLS and AMQP handshakes; cleared once open.
			if err := c.SetDeadline(deadline); err != nil {
				_ = c.Close()
				return nil, err
			}
			return c, nil
		},
	}
	// A login cut short reads as refused credentials: a second login
	// tells them apart.
	conn, err := amqplogin.Dial(func() (*amqp.Connection, error) { return amqp.DialConfig(t.cfg.URL, cfg) })
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", redact(t.cfg.URL), err)
	}
	return conn, nil
}

// redact names the broker of an AMQP URL without its credentials.
func redact(url string) string {
	u, err := amqp.ParseURI(url)
	if err != nil {
		return "the broker"
	}
	return net.JoinHostPort(u.Host, strconv.Itoa(u.Port))
}
