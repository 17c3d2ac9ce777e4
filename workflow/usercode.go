package workflow

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
)

// guard runs fn, code of the engine's user that the driver calls on its
// own goroutine (OnTaskFailure, OnDAGFailure, OnEvent, the classifier, a
// retry strategy), on a goroutine of its own, and waits for it. It reports
// whether fn returned. When it did not, it logs at ERROR "<what> panicked"
// or "<what> called runtime.Goexit", followed by then (what the engine
// does instead), with the panic and the stack it panicked on.
//
// A panic could be recovered on the driver's goroutine, but not
// runtime.Goexit (t.FailNow in a test's callback, a library that exits its
// goroutine): it ended the driver's goroutine, which is Run's caller's, so
// Run never returned and the run was left running; the instance that took
// it over a lease later called the same code and was ended too, for ever.
func guard(ctx context.Context, log *slog.Logger, what, then string, fn func(), attrs ...slog.Attr) (returned bool) {
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
