package natstransport

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// errDenied is wrapped by the error of a publish the server refused for
// the permissions of the Transport's user.
var errDenied = errors.New("the server refused it for the permissions of the transport's user")

// The subjects of the permissions violations the server reports (an -ERR
// that leaves the connection open, handed to the error handler).
var (
	deniedPublish   = regexp.MustCompile(`Publish to "(\S+)"`)
	deniedSubscribe = regexp.MustCompile(`Subscription to "(\S+)"`)
)

// denials follows the permissions violations the server reports on the
// connection the Transport dialed. The server answers a publish its user
// may not make with an asynchronous -ERR and nothing else, so that the
// Deliver waited Config.Timeout for a PubAck and failed as a timeout;
// and it refuses the subscription to the inbox that PubAcks come to
// (a user without subscribe permission on _INBOX.>) in the same way, once,
// after which JetStream stores every message published and no PubAck
// ever arrives: each retry of a Deliver that timed out stored another
// copy of the message past the stream's duplicate window. Each Deliver
// registers its publish here; a violation naming its subject, or the
// inbox, ends it at once with errDenied. A connection whose inbox was
// refused is deaf: Deliver fails on it before publishing, and the
// connection is reconnected (which subscribes again) at most once per
// Config.Timeout, staying deaf until a round trip after the reconnection
// brought no violation.
type denials struct {
	mu      sync.Mutex
	pending map[*publish]struct{}
	deaf    map[*nats.Conn]*deafness
	// reconnects is closed, and replaced, at each reconnection.
	reconnects chan struct{}
}

// publish is a Deliver waiting for its PubAck.
type publish struct {
	nc      *nats.Conn
	subject string
	deny    context.CancelCauseFunc
}

// deafness is the state of a connection whose inbox the server refused.
type deafness struct {
	err      error     // the server's violation
	checking bool      // a reconnection is under way
	checked  time.Time // when the last one started
}

// start registers a publish to subject on nc, whose ctx deny cancels with
// the violation the server reports for it. It returns the error of a deaf
// connection instead, without registering.
func (d *denials) start(nc *nats.Conn, subject string, deny context.CancelCauseFunc) (*publish, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if df := d.deaf[nc]; df != nil {
		return nil, df.err
	}
	if d.pending == nil {
		d.pending = make(map[*publish]struct{})
	}
	p := &publish{nc: nc, subject: subject, deny: deny}
	d.pending[p] = struct{}{}
	return p, nil
}

// done forgets p.
func (d *denials) done(p *publish) {
	d.mu.Lock()
	delete(d.pending, p)
	d.mu.Unlock()
}

// report takes an asynchronous error of nc: a permissions violation on a
// publish ends the Deliver calls publishing to that subject, and one on a
// subscription to nc's inbox makes nc deaf and ends every Deliver on it.
func (d *denials) report(nc *nats.Conn, err error) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if m := deniedPublish.FindStringSubmatch(err.Error()); m != nil {
		denied := fmt.Errorf("%w: may not publish to %q (%w)", errDenied, m[1], err)
		for p := range d.pending {
			if p.nc == nc && p.subject == m[1] {
				p.deny(denied)
			}
		}
		return
	}
	m := deniedSubscribe.FindStringSubmatch(err.Error())
	if m == nil || !strings.HasPrefix(m[1], inboxPrefix(nc)) {
		return
	}
	denied := fmt.Errorf("%w: may not subscribe to %q, where the PubAcks come: JetStream stores the messages published and never acknowledges them (%w)",
		errDenied, m[1], err)
	if d.deaf == nil {
		d.deaf = make(map[*nats.Conn]*deafness)
	}
	if df := d.deaf[nc]; df != nil {
		df.err = denied
	} else {
		d.deaf[nc] = &deafness{err: denied}
	}
	for p := range d.pending {
		if p.nc == nc {
			p.deny(denied)
		}
	}
}

// forget drops what is known of nc, closed for good.
func (d *denials) forget(nc *nats.Conn) {
	d.mu.Lock()
	delete(d.deaf, nc)
	d.mu.Unlock()
}

// reconnected is called when a connection reconnected.
func (d *denials) reconnected() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.reconnects != nil {
		close(d.reconnects)
		d.reconnects = nil
	}
}

// recheck reconnects nc, deaf, when no reconnection is under way and the
// last started at least timeout ago, and clears its deafness when a round
// trip after the reconnection brought no violation of its inbox (the
// client subscribes again as it reconnects).
func (d *denials) recheck(nc *nats.Conn, timeout time.Duration, now time.Time) {
	d.mu.Lock()
	df := d.deaf[nc]
	if df == nil || df.checking || now.Sub(df.checked) < timeout {
		d.mu.Unlock()
		return
	}
	df.checking, df.checked = true, now
	if d.reconnects == nil {
		d.reconnects = make(chan struct{})
	}
	reconnects := d.reconnects
	d.mu.Unlock()
	go func() {
		deaf := true
		defer func() {
			d.mu.Lock()
			df.checking = false
			if !deaf && d.deaf[nc] == df {
				delete(d.deaf, nc)
			}
			d.mu.Unlock()
		}()
		if nc.ForceReconnect() != nil {
			return
		}
		select {
		case <-reconnects:
		case <-time.After(timeout):
			return
		}
		if nc.FlushTimeout(timeout) != nil {
			return
		}
		// The server answers the subscriptions sent as the client
		// reconnected before it answers the flush's ping.
		if err := nc.LastError(); err != nil && errors.Is(err, nats.ErrPermissionViolation) {
			if m := deniedSubscribe.FindStringSubmatch(err.Error()); m != nil && strings.HasPrefix(m[1], inboxPrefix(nc)) {
				return
			}
		}
		deaf = false
	}()
}

// inboxPrefix is the prefix of nc's inboxes.
func inboxPrefix(nc *nats.Conn) string {
	if nc.Opts.InboxPrefix != "" {
		return nc.Opts.InboxPrefix + "."
	}
	return nats.InboxPrefix
}
