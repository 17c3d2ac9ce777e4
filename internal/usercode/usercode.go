// Package usercode runs code a user of Backstop handed in (a callback, a
// classifier's rule, a retry strategy) so that neither a panic nor
// runtime.Goexit in it ends the goroutine that called it.
package usercode

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
)

// Run runs fn on a goroutine of its own, waits for it, and reports
// whether fn returned. When it did not, it logs at ERROR "<what>
// panicked<then>" with the panic and the stack it panicked on, or
// "<what> called runtime.Goexit instead of returning<then>"; then says
// what the caller does instead.
//
// A panic could be recovered on the caller's goroutine, but not
// runtime.Goexit (t.FailNow in a test's callback, a library that exits
// its goroutine): it ended the caller's goroutine, a workflow run's
// driver or a relay's recorder, which no deferred recover could stop.
func Run(ctx context.Context, log *slog.Logger, what, then string, fn func(), attrs ...slog.Attr) (returned bool) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if returned {
				return
			}
			if v := recover(); v != nil {
				log.LogAttrs(ctx, slog.LevelError, what+" panicked"+then, append(attrs,
					slog.String("panic", fmt.Sprint(v)), slog.String("stack", string(debug.Stack())))...)
				return
			}
			log.LogAttrs(ctx, slog.LevelError, what+" called runtime.Goexit instead of returning"+then, attrs...)
		}()
		fn()
		returned = true
	}()
	<-done
	return returned
}
