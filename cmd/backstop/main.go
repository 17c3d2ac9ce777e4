// Command backstop is Backstop's binary: the demo, the server (relay, admin
// API and metrics in one process), the schema migrations, a config checker
// and the operator's commands, which talk to a running server's admin API
// (--server, the token from BACKSTOP_TOKEN) or directly to a store (--db).
//
//	backstop demo                      # everything on this machine, no set-up
//	backstop serve --config backstop.yaml
//	backstop migrate --db postgres://...
//	backstop config check backstop.yaml
//	backstop dlq list --destination billing
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopOnSignals(cancel)
	cmd := newRoot()
	if err := cmd.ExecuteContext(ctx); err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		fmt.Fprintln(os.Stderr, "backstop:", err)
		os.Exit(1)
	}
}

// exitError ends the process with a code after its message was printed.
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// stopOnSignals calls stop on the first SIGINT, SIGTERM or SIGHUP: a
// graceful stop. SIGHUP too: its default ends the process at once, leaving
// its leases to lapse, and serve reads its config only at start, so a
// hang-up stops it as SIGTERM does. A second signal (an operator's second
// Ctrl-C) ends the process at once, by that signal: it waited out the
// whole shutdown_timeout. A SIGINT or SIGHUP the process was started
// ignoring (nohup, a shell's background job) stays ignored.
func stopOnSignals(stop func()) {
	sigs := make(chan os.Signal, 2) // the second is never dropped
	watch := []os.Signal{syscall.SIGTERM}
	for _, s := range []os.Signal{os.Interrupt, syscall.SIGHUP} {
		if !signal.Ignored(s) {
			watch = append(watch, s)
		}
	}
	signal.Notify(sigs, watch...)
	go func() {
		<-sigs
		stop()
		sig := <-sigs
		signal.Reset()
		code := 1
		if s, ok := sig.(syscall.Signal); ok {
			_ = syscall.Kill(os.Getpid(), s) // delivered in a moment
			code = 128 + int(s)
		}
		time.Sleep(time.Second)
		os.Exit(code) // as a shell reports a signal, had it not ended the process
	}()
}
