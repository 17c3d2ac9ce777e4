package inbox

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/transport"
)

// maxNoHandlerWarnings is how many types an instance warns about, once
// each, for want of a handler; past them it logs at debug level (types
// are the sources' to choose, so the set is not bounded otherwise).
const maxNoHandlerWarnings = 100

// noHandler is the outcome of m, whose type has no handler here. Until m
// has waited Config.NoHandlerWait since it was received, it is left to
// another instance (transport.Elsewhere: given back, uncharged, due again
// after NoHandlerRetry): during a rolling deploy an instance of the
// older version claims messages of a type only the newer one handles, and
// dead-lettered them at once. Past the wait, or with a negative wait, it
// is a permanent fault of the message, dead-lettered with a reason naming
// its type.
func (in *Inbox) noHandler(ctx context.Context, m *outbox.Message) error {
	err := fmt.Errorf("inbox %q: no handler for message type %q", in.name, m.Type)
	waited := in.clk.Now().Sub(m.CreatedAt)
	if in.cfg.NoHandlerWait < 0 || waited >= in.cfg.NoHandlerWait {
		if in.cfg.NoHandlerWait >= 0 {
			err = fmt.Errorf("%w, after waiting %s for an instance that has one (NoHandlerWait)", err, waited.Round(time.Second))
		}
		return errorhandling.WithCode(errorhandling.WithReason(errorhandling.Permanent(err),
			errorhandling.ReasonValidationFailure), "no_handler")
	}
	in.metrics.noHandler()
	level := slog.LevelDebug
	if in.firstNoHandler(m.Type) {
		level = slog.LevelWarn
	}
	if in.log.Enabled(ctx, level) {
		msg := messageOf(in.name, m)
		in.log.LogAttrs(ctx, level, "no handler here for the message's type: left to an instance that has one (a rolling deploy?); dead-lettered once it has waited NoHandlerWait",
			slog.String("type", m.Type), slog.String("message_id", m.ID.String()), slog.String("source_id", msg.ID),
			slog.Duration("waited", waited), slog.Duration("no_handler_wait", in.cfg.NoHandlerWait))
	}
	return transport.Elsewhere(err, NoHandlerRetry)
}

// firstNoHandler reports whether typ is a type this instance has not yet
// warned about for want of a handler, among the first
// maxNoHandlerWarnings.
func (in *Inbox) firstNoHandler(typ string) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.noHandlerWarned[typ] || len(in.noHandlerWarned) >= maxNoHandlerWarnings {
		return false
	}
	if in.noHandlerWarned == nil {
		in.noHandlerWarned = map[string]bool{}
	}
	in.noHandlerWarned[typ] = true
	return true
}
