package natstransport

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"

	"github.com/nats-io/nats.go"
)

// errDenied is wrapped by the error of a publish the server refused for
// the permissions of the Transport's user.
var errDenied = errors.New("the server refused it for the permissions of the transport's user")

// deniedPublish finds the subject of a publish's permissions violation
// (an -ERR that leaves the connection open, handed to the error handler).
var deniedPublish = regexp.MustCompile(`Publish to "(\S+)"`)

// denials follows the permissions violations the server reports on the
// connection the Transport dialed. The server answers a publish its user
// may not make with an asynchronous -ERR and nothing else, so that the
// Deliver waited Config.Timeout for a PubAck and failed as a timeout.
// Each Deliver registers its publish here; a violation naming its subject
// ends it at once with errDenied.
type denials struct {
	mu      sync.Mutex
	pending map[*publish]struct{}
}

// publish is a Deliver waiting for its PubAck.
type publish struct {
	nc      *nats.Conn
	subject string
	deny    context.CancelCauseFunc
}

// start registers a publish to subject on nc, whose ctx deny cancels with
// the violation the server reports for it.
func (d *denials) start(nc *nats.Conn, subject string, deny context.CancelCauseFunc) *publish {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.pending == nil {
		d.pending = make(map[*publish]struct{})
	}
	p := &publish{nc: nc, subject: subject, deny: deny}
	d.pending[p] = struct{}{}
	return p
}

// done forgets p.
func (d *denials) done(p *publish) {
	d.mu.Lock()
	delete(d.pending, p)
	d.mu.Unlock()
}

// report takes an asynchronous error of nc: a permissions violation on a
// publish ends the Deliver calls publishing to that subject.
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
	}
}
