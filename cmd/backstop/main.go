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
)

func main() {
	// SIGHUP too: its default ends the process at once, leaving its leases
	// to lapse; serve reads its config only at start, so a hang-up stops
	// it as gracefully as SIGTERM does.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
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
