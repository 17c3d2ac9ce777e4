package inboxtest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/backstophq/backstop/inbox"
)

// Tally counts a handler's deliveries per message id, for a test that
// needs no application table: each message handled once is the outcome.
type Tally struct {
	mu sync.Mutex
	n  map[string]int
}

// Handle is an inbox.Func that counts msg and succeeds.
func (c *Tally) Handle(_ context.Context, msg *inbox.Message) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[msg.ID]++
	return nil
}

// Of is how many times the message id was handled.
func (c *Tally) Of(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[id]
}

// CheckOnce fails the test unless each of ids was handled exactly once
// and no other message was handled.
func (c *Tally) CheckOnce(t *testing.T, ids ...string) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		if c.n[id] != 1 {
			t.Errorf("%.40q handled %d times, want 1", id, c.n[id])
		}
	}
	if len(c.n) != len(ids) {
		t.Errorf("handled %d messages, want %d: %v", len(c.n), len(ids), c.n)
	}
}

// WaitHandled waits until in's relay has delivered len(want) messages,
// then checks that the application's rows of stream are want
// ("source_id@attempt"), in the order written: each message handled once.
func (e *Env) WaitHandled(in *inbox.Inbox, stream string, want ...string) {
	e.T.Helper()
	e.WaitFor(fmt.Sprintf("%d handled", len(want)), func() bool { return in.Relay().Stats().Delivered == int64(len(want)) })
	if got := e.Handled()[stream]; !slices.Equal(got, want) {
		e.T.Errorf("handled %v on stream %s, want %v", got, stream, want)
	}
}
