package inboxtest

import (
	"context"
	"log/slog"
	"strings"
	"sync"
)

// Logs records the level and message of every record logged through its
// Logger, for a test that checks what an outage logs and at which level.
type Logs struct {
	mu      sync.Mutex
	records []slog.Record
}

// NewLogs returns an empty record and the logger that fills it.
func NewLogs() (*Logs, *slog.Logger) {
	l := &Logs{}
	return l, slog.New(logsHandler{l})
}

// Count is how many records at level begin with prefix.
func (l *Logs) Count(level slog.Level, prefix string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.records {
		if r.Level == level && strings.HasPrefix(r.Message, prefix) {
			n++
		}
	}
	return n
}

type logsHandler struct{ l *Logs }

func (h logsHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h logsHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h logsHandler) WithGroup(string) slog.Handler            { return h }
func (h logsHandler) Handle(_ context.Context, r slog.Record) error {
	h.l.mu.Lock()
	defer h.l.mu.Unlock()
	h.l.records = append(h.l.records, r.Clone())
	return nil
}
