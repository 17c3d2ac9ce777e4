// Package resume runs an inbox receiver's sessions with a broker again
// after they end, waiting a doubling delay between tries.
package resume

import (
	"context"
	"log/slog"
	"time"
)

// Config says how a receiver resumes.
type Config struct {
	// Delay is the first wait before another session; it doubles up to
	// MaxDelay while sessions fail to start, and a session that started
	// resets it.
	Delay, MaxDelay time.Duration
	// Log receives a warning, Message with Attrs, when a session ends or
	// fails to start after one that started (or at the first); the
	// failed tries that follow it are logged at debug level, and the
	// session that starts after them at info level: an outage is one
	// warning, not one per try.
	Log     *slog.Logger
	Message string
	Attrs   []slog.Attr
	// Fatal, when set, says that a session's error ends Run at once.
	Fatal func(error) bool
	// Permanent, when set, says that the first session's error is a
	// mistake of the configuration that no retry cures (a queue that does
	// not exist, credentials refused): Run returns it, so that the mistake
	// shows at once. A first session that fails for another reason (the
	// broker unreachable) is tried again like any other. Nil: every first
	// session that did not start ends Run.
	Permanent func(error) bool
	// Retrying, when set, runs before each session after the first (a
	// test hook).
	Retrying func()
}

// Session is one session with the broker: it calls started once it takes
// messages, and returns when it ends, reporting whether it started and
// why it ended.
type Session func(ctx context.Context, started func()) (bool, error)

// Run calls session until ctx is done, then returns nil. A first session
// that did not start, with an error Permanent names, is Run's error; so
// is an error Fatal names.
func Run(ctx context.Context, c Config, session Session) error {
	delay := c.Delay
	// warned is set once the outage under way has been logged; failed
	// counts its tries that did not start.
	warned, failed := false, 0
	up := func() {
		if failed > 0 {
			attrs := append(append([]slog.Attr(nil), c.Attrs...), slog.Int("failed_tries", failed))
			c.Log.LogAttrs(ctx, slog.LevelInfo, "session started again", attrs...)
		}
		warned, failed = false, 0
	}
	for first := true; ; first = false {
		started, err := session(ctx, up)
		switch {
		case ctx.Err() != nil:
			return nil
		case first && !started && (c.Permanent == nil || c.Permanent(err)), c.Fatal != nil && c.Fatal(err):
			return err
		}
		level := slog.LevelWarn
		switch {
		case started:
			delay, warned = c.Delay, true
		case warned:
			level = slog.LevelDebug
			failed++
		default:
			warned = true
			failed++
		}
		attrs := append(append([]slog.Attr(nil), c.Attrs...),
			slog.Duration("after", delay), slog.String("error", err.Error()))
		c.Log.LogAttrs(ctx, level, c.Message, attrs...)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		delay = min(2*delay, c.MaxDelay)
		if c.Retrying != nil {
			c.Retrying()
		}
	}
}
