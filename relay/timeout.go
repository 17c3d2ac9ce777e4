package relay

import (
	"context"
	"sync"
	"time"

	"github.com/backstophq/backstop/clock"
)

// withTimeout returns a copy of parent that is done d after now on clk,
// with Err() == context.DeadlineExceeded then, so that a delivery's timeout
// follows the relay's clock (a fake one in tests) and is classified as a
// timeout. On the wall clock it is context.WithTimeout.
func withTimeout(parent context.Context, clk clock.Clock, d time.Duration) (context.Context, context.CancelFunc) {
	if clk == clock.Real {
		return context.WithTimeout(parent, d)
	}
	c := &clockCtx{Context: parent, done: make(chan struct{}), stop: make(chan struct{})}
	t := clk.NewTimer(d)
	go func() {
		select {
		case <-t.C():
			c.finish(context.DeadlineExceeded)
		case <-parent.Done():
			t.Stop()
			c.finish(parent.Err())
		case <-c.stop:
			t.Stop()
			c.finish(context.Canceled)
		}
	}()
	return c, func() { c.once.Do(func() { close(c.stop) }) }
}

// clockCtx is the context withTimeout returns on a clock other than the
// wall clock. Its Deadline is its parent's: the fake deadline means nothing
// to code that reads the wall clock.
type clockCtx struct {
	context.Context
	done chan struct{}
	stop chan struct{}
	once sync.Once

	mu  sync.Mutex
	err error
}

func (c *clockCtx) Done() <-chan struct{} { return c.done }

func (c *clockCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *clockCtx) finish(err error) {
	c.mu.Lock()
	c.err = err
	c.mu.Unlock()
	close(c.done)
}
