package natstransport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// errNoAck is wrapped by the error of a Deliver to a stream that does
// not acknowledge publishes.
var errNoAck = errors.New("the stream does not acknowledge publishes (no_ack)")

// noAcks follows the streams found configured with no_ack. Such a stream
// stores what is published to it and never answers with a PubAck: each
// Deliver timed out, and each retry stored another copy of the message
// once the stream's duplicate window had passed, for as long as the
// stream stayed so, since no delivery ever succeeded. When a PubAck does
// not come, the stream capturing the subject is read in the background
// (one read at a time); a no_ack stream is remembered, and a Deliver to
// it then fails before publishing, the stream's configuration being read
// again at most once per Config.Timeout, so that deliveries resume once
// an operator turns no_ack off.
type noAcks struct {
	checking atomic.Bool // a background read is under way
	mu       sync.Mutex
	streams  map[string]time.Time // no_ack stream → when its configuration was read
}

// streamOf returns the name of the stream capturing subject, and whether
// its configuration says no_ack.
func (t *Transport) streamOf(ctx context.Context, js jetstream.JetStream, subject string) (name string, noAck bool, err error) {
	name = t.cfg.Stream
	if name == "" {
		if name, err = js.StreamNameBySubject(ctx, subject); err != nil {
			return "", false, err
		}
	}
	st, err := js.Stream(ctx, name)
	if err != nil {
		return "", false, err
	}
	return name, st.CachedInfo().Config.NoAck, nil
}

// noAckForget is how long a no_ack stream no Deliver went to is
// remembered. While one is, every Deliver asks the server which stream
// captures its subject before publishing.
const noAckForget = time.Hour

// noAckTimedOut is called when the PubAck of a publish to subject did not
// come: it reads the stream capturing subject in the background and
// remembers it when it is configured with no_ack.
func (t *Transport) noAckTimedOut(js jetstream.JetStream, subject string) {
	if !t.noAck.checking.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer t.noAck.checking.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), t.cfg.Timeout)
		defer cancel()
		name, noAck, err := t.streamOf(ctx, js, subject)
		if err != nil || !noAck {
			return
		}
		t.noAck.mu.Lock()
		if t.noAck.streams == nil {
			t.noAck.streams = make(map[string]time.Time)
		}
		t.noAck.streams[name] = time.Now()
		t.noAck.mu.Unlock()
		t.cfg.Logger.Warn("natstransport: the stream does not acknowledge publishes (no_ack); nothing is published to it until it does",
			slog.String("stream", name))
	}()
}

// refuseNoAck returns errNoAck, wrapped, when subject's stream is known
// to be configured with no_ack, reading its configuration again when it
// was read Config.Timeout ago or more; nil otherwise, and when nothing is
// known of such a stream (without asking the server). A stream no Deliver
// went to for noAckForget is forgotten.
func (t *Transport) refuseNoAck(ctx context.Context, js jetstream.JetStream, subject string) error {
	t.noAck.mu.Lock()
	for name, read := range t.noAck.streams {
		if time.Since(read) >= noAckForget {
			delete(t.noAck.streams, name)
		}
	}
	none := len(t.noAck.streams) == 0
	t.noAck.mu.Unlock()
	if none {
		return nil
	}
	name := t.cfg.Stream
	if name == "" {
		var err error
		if name, err = js.StreamNameBySubject(ctx, subject); err != nil {
			return nil
		}
	}
	t.noAck.mu.Lock()
	read, ok := t.noAck.streams[name]
	t.noAck.mu.Unlock()
	if !ok {
		return nil
	}
	if time.Since(read) >= t.cfg.Timeout {
		_, noAck, err := t.streamOf(ctx, js, subject)
		t.noAck.mu.Lock()
		if err == nil && !noAck {
			delete(t.noAck.streams, name)
		} else {
			t.noAck.streams[name] = time.Now()
		}
		t.noAck.mu.Unlock()
		if err == nil && !noAck {
			return nil
		}
	}
	return fmt.Errorf("stream %s: %w: the transport cannot tell that it stored a message, and each retry would store another copy", name, errNoAck)
}
