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
	// Log receives a warning, Message with Attrs, before each wait.
	Log     *slog.Logger
	Message string
	Attrs   []slog.Attr
	// Fatal, when set, says that a session's error ends Run at once.
	Fatal func(error) bool
	// Retrying, when set, runs before each session after the first (a
	// test hook).
	Retrying func()
}

// Run calls session until ctx is done, then returns nil. session reports
// whether it started and why it ended. A first session that did not start
// is Run's error, so that a mistake in the configuration shows at once;
// so is an error Fatal names.
func Run(ctx context.Context, c Config, session func(context.Context) (started bool, err error)) error {
	delay := c.Delay
	for first := true; ; first = false {
		started, err := session(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case first && !started, c.Fatal != nil && c.Fatal(err):
			return err
		}
		if started {
			delay = c.Delay
		}
		attrs := append(append([]slog.Attr(nil), c.Attrs...),
			slog.Duration("after", delay), slog.String("error", err.Error()))
		c.Log.LogAttrs(ctx, slog.LevelWarn, c.Message, attrs...)
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
