package inboxtest

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// SignalOn returns a logger that discards its records and signals the
// channel (buffered, a signal dropped when it is full) for each record
// whose message begins with prefix: a test waits on it for what the code
// under test logs.
func SignalOn(prefix string) (*slog.Logger, <-chan struct{}) {
	c := make(chan struct{}, 100)
	return slog.New(signalHandler{prefix: prefix, c: c}), c
}

type signalHandler struct {
	prefix string
	c      chan<- struct{}
}

func (h signalHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h signalHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h signalHandler) WithGroup(string) slog.Handler            { return h }
func (h signalHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, h.prefix) {
		select {
		case h.c <- struct{}{}:
		default:
		}
	}
	return nil
}

// Await waits for n signals on c (a hook of the code under test firing,
// or SignalOn's channel), and fails the test when ctx ends first.
func Await(t *testing.T, ctx context.Context, what string, c <-chan struct{}, n int) {
	t.Helper()
	for i := range n {
		select {
		case <-c:
		case <-ctx.Done():
			t.Fatalf("waited for %s, %d of %d: %v", what, i+1, n, ctx.Err())
		}
	}
}

// Within waits up to d for n signals on c and reports whether they came,
// for a test that says itself what a timeout means.
func Within(d time.Duration, c <-chan struct{}, n int) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for range n {
		select {
		case <-c:
		case <-deadline.C:
			return false
		}
	}
	return true
}
