package main

import "github.com/spf13/cobra"

// addCommands adds the commands other than the demo.
func addCommands(root *cobra.Command, g *globals) {
	root.AddCommand(newConfigCmd(), newServeCmd(g), newMigrateCmd(g), newBenchCmd(g))
	root.AddCommand(newEnqueueCmd(g), newMessagesCmd(g), newStreamsCmd(g), newDLQCmd(g),
		newStatsCmd(g), newBreakersCmd(g), newAuditCmd(g), newWorkflowsCmd(g))
}
