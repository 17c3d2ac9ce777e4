package inboxtest

import (
	"context"
	"log/slog"
	"strings"
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
