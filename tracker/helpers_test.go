package tracker

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/retry"
)

// t0 is where every fake clock in these tests starts.
var t0 = time.Date(2024, time.March, 1, 12, 0, 0, 0, time.UTC)

// doubling is the tests' own strategy: base, 2*base, 4*base, ... with no
// cap; after stopAfter faults (when positive) it says stop.
type doubling struct {
	base      time.Duration
	stopAfter int
}

func (d doubling) Delay(n int) time.Duration {
	if d.stopAfter > 0 && n > d.stopAfter {
		return retry.Stop
	}
	return d.base << (n - 1)
}

func newFake() *clock.Fake { return clock.NewFake(t0) }

// discard is a logger that drops everything.
var discard = slog.New(slog.DiscardHandler)

// logSink captures slog output as JSON lines.
type logSink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *logSink) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(s, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// records returns every captured record at level (e.g. "WARN").
func (s *logSink) records(t *testing.T, level string) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(s.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("bad log line %q: %v", line, err)
		}
		if m["level"] == level {
			out = append(out, m)
		}
	}
	return out
}

// wantDeadline fails unless tok expires exactly at want.
func wantDeadline(t *testing.T, tok RetryToken, want time.Time) {
	t.Helper()
	if got := tok.Deadline(); !got.Equal(want) {
		t.Fatalf("deadline = %v, want %v (+%v)", got, want, want.Sub(t0))
	}
}
