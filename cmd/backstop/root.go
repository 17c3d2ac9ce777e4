package main

import (
	"github.com/spf13/cobra"
)

// globals are the flags every operator command shares.
type globals struct {
	server string // admin API base URL
	db     string // a store instead of a server
	prefix string // the store's table prefix, with db
	output string // table or json
}

func newRoot() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:           "backstop",
		Short:         "Reliable delivery of side effects: outbox relay, retries, breakers, dead letters",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.server, "server", envOr("BACKSTOP_SERVER", ""), "admin API of a running server, such as http://127.0.0.1:8080 (token from BACKSTOP_TOKEN); env BACKSTOP_SERVER")
	pf.StringVar(&g.db, "db", "", "work directly on a store: sqlite:PATH or a postgres:// URL")
	pf.StringVar(&g.prefix, "table-prefix", "", "with --db, the store's table prefix (store.table_prefix of serve's config; default backstop_)")
	pf.StringVarP(&g.output, "output", "o", "table", "output format: table or json")
	root.AddCommand(newDemoCmd())
	addCommands(root, g)
	return root
}
