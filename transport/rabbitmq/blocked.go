package rabbitmq

import (
	"errors"
	"fmt"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"
)

// errBlocked is wrapped by the error of a Deliver on a connection the
// broker blocks (connection.blocked: a memory or disk alarm).
var errBlocked = errors.New("the broker blocks publishers")

// blocking follows the connection.blocked and connection.unblocked the
// broker sends on one connection. A broker under a memory or disk alarm
// tells a connection it blocks once the connection publishes, and stops
// reading it until the alarm clears. Without it, each Deliver timed out
// (Config.Timeout), its connection was dropped as silent and the next
// Deliver dialed a new one, published again and timed out in turn; and
// the broker, reading each dropped connection's data once the alarm
// cleared, enqueued every one of those messages that Deliver had reported
// as failed, a copy per retry. While the connection is blocked, Deliver
// fails at once without publishing, the connection is kept (it is not
// silent), and publishing resumes on it when the broker unblocks it.
type blocking struct {
	mu     sync.Mutex
	reason string        // the broker's reason; empty while not blocked
	now    chan struct{} // closed while blocked
}

// watchBlocked returns the blocking state of conn, kept up to date until
// conn closes.
func watchBlocked(conn *amqp.Connection) *blocking {
	b := &blocking{now: make(chan struct{})}
	notes := conn.NotifyBlocked(make(chan amqp.Blocking, 1))
	go func() {
		for n := range notes {
			b.mu.Lock()
			switch {
			case n.Active && b.reason == "":
				b.reason = n.Reason
				if b.reason == "" {
					b.reason = "no reason given"
				}
				close(b.now)
			case !n.Active && b.reason != "":
				b.reason = ""
				b.now = make(chan struct{})
			}
			b.mu.Unlock()
		}
	}()
	return b
}

// blocked returns the error of a connection the broker blocks, or nil.
func (b *blocking) blocked() error {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.reason == "" {
		return nil
	}
	return fmt.Errorf("%w (%s): a memory or disk alarm; nothing is published until it clears", errBlocked, b.reason)
}

// whenBlocked returns a channel closed once the broker blocks the
// connection (at once if it does already); nil (never) for a nil b.
func (b *blocking) whenBlocked() <-chan struct{} {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.now
}
