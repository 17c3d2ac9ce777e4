package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// globals are the flags every operator command shares.
type globals struct {
	server string // admin API base URL
	db     string // a store instead of a server
	prefix string // the store's table prefix, with db
	output string // table or json
	// timeout bounds the wait for a server's answer (--timeout).
	timeout time.Duration
}

// DefaultTimeout is --timeout's default: past the server's own bound on a
// request's store work (request_timeout, 30 s by default), so that a
// server that answers late says why.
const DefaultTimeout = time.Minute

func newRoot() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:           "backstop",
		Short:         "Reliable delivery of side effects: outbox relay, retries, breakers, dead letters",
		SilenceUsage:  true,
		SilenceErrors: true,
		// --db given but empty is an unset variable (--db "$DATABASE_URL"),
		// not "no store": it fell back to the default SQLite file in the
		// working directory, and a migrate meant for production migrated
		// ./backstop.db and exited 0.
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if f := cmd.Flags().Lookup("db"); f != nil && f.Changed && strings.TrimSpace(g.db) == "" {
				return fmt.Errorf("--db is empty (an unset variable?): give sqlite:PATH or a postgres:// URL, or leave --db out")
			}
			return nil
		},
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.server, "server", envOr("BACKSTOP_SERVER", ""), "admin API of a running server, such as http://127.0.0.1:8080 (token from BACKSTOP_TOKEN); env BACKSTOP_SERVER")
	pf.StringVar(&g.db, "db", "", "work directly on a store: sqlite:PATH or a postgres:// URL")
	pf.StringVar(&g.prefix, "table-prefix", "", "with --db, the store's table prefix (store.table_prefix of serve's config; default backstop_)")
	pf.StringVarP(&g.output, "output", "o", "table", "output format: table or json")
	pf.DurationVar(&g.timeout, "timeout", DefaultTimeout, "with --server, give up on a server that has said nothing for this long (a bulk action goes on while the server reports progress); 0 waits for ever")
	root.AddCommand(newDemoCmd())
	addCommands(root, g)
	refuseUnknownSubcommands(root)
	return root
}

// refuseUnknownSubcommands makes each command group below root (dlq,
// messages, workflows runs...) fail on an argument that names none of its
// subcommands. Cobra shows the help of a group that cannot run and
// succeeds, whatever follows it: a script's `backstop dlq replya --all`
// exited 0. A group given nothing still shows its help.
func refuseUnknownSubcommands(c *cobra.Command) {
	for _, sub := range c.Commands() {
		refuseUnknownSubcommands(sub)
	}
	if c.HasParent() && !c.Runnable() && c.HasSubCommands() {
		c.Args = cobra.ArbitraryArgs
		if c.SuggestionsMinimumDistance <= 0 {
			c.SuggestionsMinimumDistance = 2 // what cobra uses for the root
		}
		c.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				msg += "; did you mean " + strings.Join(s, " or ") + "?"
			}
			return fmt.Errorf("%s (see %s --help)", msg, cmd.CommandPath())
		}
	}
}
