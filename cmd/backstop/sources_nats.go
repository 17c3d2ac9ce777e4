package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop/inbox/natsinbox"
)

// How long serve waits before trying again to connect a NATS source whose
// server it could not reach, or to create its consumer: the wait doubles
// from natsOpenDelay up to natsOpenMaxDelay.
const (
	natsOpenDelay    = 100 * time.Millisecond
	natsOpenMaxDelay = 30 * time.Second
	// natsOpenTimeout bounds each try to connect, and to create the
	// consumer.
	natsOpenTimeout = 10 * time.Second
)

// natsOpener opens a NATS source: it connects to the server and creates
// or updates the durable consumer, then reads it (natsinbox). A server
// that cannot be reached at serve's start does not stop serve: the source
// is not ready (health says why) and is opened once the server is back.
type natsOpener struct {
	s     *source
	log   *slog.Logger
	newRx func(cons jetstream.Consumer) (*natsinbox.Receiver, error)

	mu     sync.Mutex
	nc     *nats.Conn // nil until connected
	rcv    *natsinbox.Receiver
	why    error // why the source is not open, while rcv is nil
	closed bool
}

// open connects (unless connected already) and creates or updates the
// consumer, and makes the receiver. Its error names the config key at
// fault when the server refused it.
func (n *natsOpener) open(ctx context.Context) error {
	sc := n.s.cfg
	n.mu.Lock()
	nc := n.nc
	n.mu.Unlock()
	if nc == nil {
		var err error
		nc, err = nats.Connect(sc.URL, append(natsSourceOptions(sc.Inbox, n.log), nats.Timeout(natsOpenTimeout))...)
		if err != nil {
			return n.failed(fmt.Errorf("url: connect to %s: %w", redactDB(sc.URL), err))
		}
		n.mu.Lock()
		if n.closed {
			n.mu.Unlock()
			nc.Close()
			return errors.New("closed")
		}
		n.nc = nc
		n.mu.Unlock()
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return n.failed(fmt.Errorf("jetstream: %w", err))
	}
	cctx, cancel := context.WithTimeout(ctx, natsOpenTimeout)
	defer cancel()
	cons, err := js.CreateOrUpdateConsumer(cctx, sc.Stream, jetstream.ConsumerConfig{
		Durable: sc.Consumer, AckPolicy: jetstream.AckExplicitPolicy, AckWait: sc.AckWait.D(),
		MaxAckPending: 1, FilterSubject: sc.Subject,
	})
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound), errors.Is(err, jetstream.ErrInvalidStreamName):
		return n.failed(fmt.Errorf("stream: %q: %w", sc.Stream, err))
	case errors.Is(err, jetstream.ErrInvalidConsumerName):
		return n.failed(fmt.Errorf("consumer: %q: %w", sc.Consumer, err))
	case errors.Is(err, jetstream.ErrInvalidSubject), apiErrorCode(err, errCodeFilterNotSubset):
		// The filter subject the server refuses (not one of the
		// stream's): named by its key, as the stream and consumer are.
		return n.failed(fmt.Errorf("subject: %q: %w", sc.Subject, err))
	case err != nil:
		return n.failed(fmt.Errorf("consumer %s on stream %s: %w", sc.Consumer, sc.Stream, err))
	}
	r, err := n.newRx(cons)
	if err != nil {
		return n.failed(err)
	}
	n.mu.Lock()
	n.rcv, n.why = r, nil
	n.mu.Unlock()
	return nil
}

// errCodeFilterNotSubset is JetStream's refusal of a consumer whose filter
// subject the stream does not capture.
const errCodeFilterNotSubset = 10093

// apiErrorCode reports whether err is a JetStream API error with code.
func apiErrorCode(err error, code jetstream.ErrorCode) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && api.ErrorCode == code
}

// failed records err as why the source is not open, and returns it.
func (n *natsOpener) failed(err error) error {
	n.mu.Lock()
	n.why = err
	n.mu.Unlock()
	return err
}

// run opens the source, when serve's start could not (the start logged
// why), then reads it until ctx is done. While the source cannot be
// opened it tries again, waiting natsOpenDelay doubling up to
// natsOpenMaxDelay, logging the tries at debug level, but for an error
// once the server refuses the configuration (natsinbox.IsPermanent: the
// stream missing, credentials refused), which an operator must fix.
func (n *natsOpener) run(ctx context.Context) error {
	if r := n.receiver(); r != nil {
		return r.Run(ctx)
	}
	delay, refused := natsOpenDelay, false
	for tries := 1; ; tries++ {
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		err := n.open(ctx)
		switch {
		case err == nil:
			n.log.Info("NATS source open: reading its consumer", "tries", tries)
			return n.receiver().Run(ctx)
		case ctx.Err() != nil:
			return nil
		case natsinbox.IsPermanent(err) && !refused:
			refused = true
			n.log.Error("NATS source refused by its server; trying again", "error", err.Error())
		default:
			n.log.Debug("NATS source not open; trying again", "error", err.Error(), "after", delay.String())
		}
		delay = min(2*delay, natsOpenMaxDelay)
	}
}

// receiver is the source's receiver, nil until it is open.
func (n *natsOpener) receiver() *natsinbox.Receiver {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.rcv
}

// health says why the source cannot receive now, nil when it can.
func (n *natsOpener) health(context.Context) error {
	n.mu.Lock()
	nc, r, why := n.nc, n.rcv, n.why
	n.mu.Unlock()
	url := redactDB(n.s.cfg.URL)
	switch {
	case nc == nil:
		return fmt.Errorf("not connected to NATS at %s: %w", url, why)
	case !nc.IsConnected():
		msg := fmt.Sprintf("NATS connection to %s is %s", url, nc.Status())
		if err := nc.LastError(); err != nil {
			msg += ": " + err.Error()
		}
		return errors.New(msg)
	case r == nil:
		return fmt.Errorf("consumer not open: %w", why)
	}
	_, err := r.Reading()
	return err
}

// close closes the connection.
func (n *natsOpener) close() {
	n.mu.Lock()
	nc := n.nc
	n.closed = true
	n.mu.Unlock()
	if nc != nil {
		nc.Close()
	}
}
