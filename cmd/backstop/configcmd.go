package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/backstophq/backstop/internal/config"
)

func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Work with the configuration file"}
	cmd.AddCommand(&cobra.Command{
		Use:   "check FILE",
		Short: "Validate a configuration without starting anything: every problem with its key and line",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := config.Load(args[0])
			if err != nil {
				return err
			}
			// serve adds BACKSTOP_ADMIN_TOKEN to the config's tokens, and
			// refuses one it would refuse: so does the check.
			if _, err := tokensOf(c); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: ok\n%s", args[0], c.Summary())
			if os.Getenv("BACKSTOP_ADMIN_TOKEN") != "" {
				fmt.Fprintln(cmd.OutOrStdout(), "and BACKSTOP_ADMIN_TOKEN: an operate token named env")
			}
			return nil
		},
	})
	return cmd
}
