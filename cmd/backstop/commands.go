package main

import "github.com/spf13/cobra"

// addCommands adds the commands other than the demo.
func addCommands(root *cobra.Command, g *globals) {
	root.AddCommand(newConfigCmd(), newServeCmd(g), newMigrateCmd(g))
}
