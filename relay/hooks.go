package relay

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
)

// Failure is a failed attempt charged to a message, as Config.OnFailure
// and Config.OnDeadLetter receive it once the store has recorded it.
type Failure struct {
	// Message is the message as it was claimed (Attempts before this
	// attempt).
	Message *outbox.Message
	// Err is the delivery error.
	Err error
	// Classification is what the relay's classifier made of Err.
	Classification errorhandling.Classification
	// Attempts is the message's attempts including this one.
	Attempts int
	// Permanent is set when the fault was permanent: dead-lettered at
	// once rather than for running out of attempts.
	Permanent bool
	// Reason is the dead-letter reason: the classification's for a
	// permanent fault, PoisonMessage when attempts ran out.
	Reason errorhandling.FailureReason
}

// callHook runs a user callback, logging and swallowing a panic. It runs
// it on a goroutine of its own and waits: hooks are called by the
// recorder, and a hook that calls runtime.Goexit (t.Fatal in a test's
// hook), which recover cannot stop, ended the recorder's goroutine, after
// which no outcome was recorded again.
func (r *Relay) callHook(name string, fn func()) {
	done := make(chan struct{})
	go func() {
		finished := false
		defer close(done)
		defer func() {
			if p := recover(); p != nil {
				r.log.LogAttrs(context.Background(), slog.LevelError, "relay hook panicked",
					slog.String("hook", name), slog.String("panic", outbox.TruncateError(fmt.Sprint(p))),
					slog.String("stack", string(debug.Stack())))
			} else if !finished {
				r.log.LogAttrs(context.Background(), slog.LevelError, "relay hook called runtime.Goexit",
					slog.String("hook", name))
			}
		}()
		fn()
		finished = true
	}()
	<-done
}

// failureOf is the Failure of an outcome the store recorded.
func failureOf(o *outcome, dead bool) Failure {
	f := Failure{Message: o.m, Err: o.err, Classification: o.v, Attempts: o.m.Attempts + 1, Permanent: o.permanent, Reason: o.v.Reason}
	if dead && !o.permanent {
		f.Reason = errorhandling.ReasonPoisonMessage
	}
	return f
}

// hookDelivered, hookFailed and hookDeadLettered call the hooks, and tell
// Config.DeadLetters of a dead letter.
func (r *Relay) hookDelivered(o *outcome) {
	if fn := r.cfg.OnDelivered; fn != nil {
		r.callHook("OnDelivered", func() { fn(o.m) })
	}
}

func (r *Relay) hookFailed(o *outcome) {
	if fn := r.cfg.OnFailure; fn != nil {
		r.callHook("OnFailure", func() { fn(failureOf(o, false)) })
	}
}

func (r *Relay) hookDeadLettered(o *outcome) {
	f := failureOf(o, true)
	if fn := r.cfg.OnDeadLetter; fn != nil {
		r.callHook("OnDeadLetter", func() { fn(f) })
	}
	if m := r.cfg.DeadLetters; m != nil {
		e := &dlq.Entry{
			MessageID:       o.m.ID.String(),
			Destination:     o.m.Destination,
			Stream:          o.m.Stream,
			Type:            o.m.Type,
			Seq:             o.m.Seq,
			Reason:          f.Reason,
			FailureReason:   f.Reason.String(),
			ErrorMessage:    o.errorText(),
			Fingerprint:     errorhandling.Fingerprint(o.err),
			Attempts:        f.Attempts,
			Status:          dlq.StatusPending,
			FailureTime:     r.clk.Now(),
			LastAttemptTime: r.clk.Now(),
		}
		r.callHook("DeadLetters", func() { m.Notify(context.Background(), e) })
	}
}
