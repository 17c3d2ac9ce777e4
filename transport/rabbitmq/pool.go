package rabbitmq

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// pubChannel is a channel in confirm mode with its own return and close
// listeners. One Deliver at a time uses it.
type pubChannel struct {
	conn    *amqp.Connection
	ch      *amqp.Channel
	returns chan amqp.Return // basic.return, which precedes the message's confirm
	closes  chan *amqp.Error // why the broker closed the channel, if it did
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

// take pops a usable idle channel or opens a new one.
func (t *Transport) take(ctx context.Context) (*pubChannel, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, ErrClosed
	}
	for len(t.idle) > 0 {
		pc := t.idle[len(t.idle)-1]
		t.idle = t.idle[:len(t.idle)-1]
		if pc.healthy() {
			return pc, nil
		}
	}
	if t.conn == nil || t.conn.IsClosed() {
		t.idle = nil
		conn, err := t.dial(ctx)
		if err != nil {
			return nil, err
		}
		t.conn = conn
	}
	ch, err := t.conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("open channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("enable publisher confirms: %w", err)
	}
	return &pubChannel{
		conn:    t.conn,
		ch:      ch,
		returns: ch.NotifyReturn(make(chan amqp.Return, 4)),
		closes:  ch.NotifyClose(make(chan *amqp.Error, 1)),
	}, nil
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
	conn, err := amqp.DialConfig(t.cfg.URL, amqp.Config{
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
	})
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
