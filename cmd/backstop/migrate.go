package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/backstophq/backstop/internal/config"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/postgres"
	"github.com/backstophq/backstop/store/sqlite"
)

func newMigrateCmd(g *globals) *cobra.Command {
	var cfgPath string
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade the store's tables (versioned, idempotent)",
		Long: `migrate applies the store's versioned migrations that have not been applied
yet, in one transaction (under an advisory lock on PostgreSQL), and those of
the workflow store. Running it again changes nothing. The store is --db, else
the config's db.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			db := g.db
			sc := store.Config{}
			if cfgPath != "" {
				c, err := config.Load(cfgPath)
				if err != nil {
					return err
				}
				sc.TablePrefix = c.Store.TablePrefix
				if db == "" {
					db = c.DB
				}
			}
			if g.prefix != "" {
				sc.TablePrefix = g.prefix // the flag over the config, as --db over its db
			}
			if db == "" {
				db = config.DefaultDB
			}
			st, err := openStore(cmd.Context(), db, sc)
			if err != nil {
				return err
			}
			defer st.Close()
			// serve opens the workflow store too: its tables are made
			// here, so that serve may run as a role that cannot create
			// tables.
			if _, err := workflowsOf(cmd.Context(), st); err != nil {
				return err
			}
			var v, known int
			switch st := st.(type) {
			case *postgres.Store:
				v, err = st.SchemaVersion(cmd.Context())
				known = postgres.LatestSchemaVersion()
			case *sqlite.Store:
				v, err = st.SchemaVersion(cmd.Context())
				known = sqlite.LatestSchemaVersion()
			}
			if err != nil {
				return err
			}
			if v > known {
				// a newer backstop migrated it: say so, not "migrated"
				fmt.Fprintf(cmd.OutOrStdout(), "%s: schema version %d is newer than this backstop's %d: nothing applied; run the newer backstop\n",
					redactDB(db), v, known)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "migrated %s: schema version %d\n", redactDB(db), v)
			return nil
		},
	}
	cmd.Flags().StringVarP(&cfgPath, "config", "c", "", "a configuration file (for its db and table prefix)")
	return cmd
}
