package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/backstophq/backstop/admin"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/postgres"
	"github.com/backstophq/backstop/store/sqlite"
	"github.com/backstophq/backstop/workflow/wfpostgres"
	"github.com/backstophq/backstop/workflow/wfsqlite"
)

// workflowsOf opens the workflow store on st's database (creating its
// tables when missing), for the admin API to read runs from. The server
// knows no DAG definitions: runs are shown with the dependencies each kept
// when it was created.
func workflowsOf(ctx context.Context, st store.Store) (*admin.Workflows, error) {
	switch s := st.(type) {
	case *sqlite.Store:
		ws, err := wfsqlite.New(ctx, s)
		if err != nil {
			return nil, err
		}
		return &admin.Workflows{Store: ws, List: admin.SQLiteRuns(s)}, nil
	case *postgres.Store:
		ws, err := wfpostgres.New(ctx, s)
		if err != nil {
			return nil, err
		}
		return &admin.Workflows{Store: ws, List: admin.PostgresRuns(s, "")}, nil
	}
	return nil, fmt.Errorf("workflows: no workflow store for %T", st)
}

func newWorkflowsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "workflows", Short: "Inspect workflow (DAG) runs"}
	runs := &cobra.Command{Use: "runs", Short: "List workflow runs and show one as its task graph"}
	var dagID, state, cursor string
	var limit int
	list := &cobra.Command{
		Use: "list", Short: "List workflow runs, newest first", Args: cobra.NoArgs,
		RunE: g.action(func(ctx context.Context, c *admin.Client, p printer, _ []string) error {
			q := url.Values{}
			setQ(q, "dag_id", dagID, "state", state, "cursor", cursor)
			q.Set("limit", fmt.Sprint(limit))
			l, err := c.WorkflowRuns(ctx, q)
			if err != nil {
				return err
			}
			return p.value(l, func(tw *tabwriter.Writer) {
				row(tw, "ID", "DAG", "STATE", "CREATED", "ENDED", "REASON")
				for _, r := range l.Items {
					row(tw, r.ID, r.DAGID, r.State, ago(r.CreatedAt), agoPtr(r.EndedAt), dash(short(r.Reason, 100)))
				}
				if l.NextCursor != "" {
					row(tw, "(more: --cursor "+l.NextCursor+")")
				}
			})
		}),
	}
	list.Flags().StringVar(&dagID, "dag", "", "only runs of this DAG")
	list.Flags().StringVar(&state, "state", "", "only runs in this state: running, success, failed or partial_success")
	list.Flags().StringVar(&cursor, "cursor", "", "continue after a previous page")
	list.Flags().IntVar(&limit, "limit", 100, "at most this many (1-1000)")

	show := &cobra.Command{
		Use: "show ID", Short: "Show a run as its task graph: each task's state, dependencies, attempts and why", Args: cobra.ExactArgs(1),
		RunE: g.action(func(ctx context.Context, c *admin.Client, p printer, args []string) error {
			if args[0] == "" {
				// An unset variable (show "$RUN"): the request went to
				// /v1/workflows/runs/, which the API said was no route.
				return errors.New("the run ID is empty: give the ID of a run (backstop workflows runs list shows them)")
			}
			r, err := c.WorkflowRun(ctx, args[0])
			if err != nil {
				return err
			}
			return p.value(r, func(tw *tabwriter.Writer) {
				for _, kv := range [][2]any{{"run", r.ID}, {"dag", r.DAGID}, {"state", r.State}, {"reason", dash(r.Reason)},
					{"owner", dash(r.Owner)}, {"created", ago(r.CreatedAt)}, {"ended", agoPtr(r.EndedAt)}} {
					row(tw, kv[0], kv[1])
				}
				row(tw)
				row(tw, "TASK", "STATE", "ATTEMPTS", "UPSTREAM", "STARTED", "ENDED", "REASON")
				unknown := false
				for _, t := range r.Tasks {
					up := "?"
					if t.Upstream == nil {
						unknown = true
					} else {
						up = dash(strings.Join(t.Upstream, ","))
					}
					why := t.Reason
					if t.Error != "" && !strings.Contains(why, t.Error) {
						why = strings.TrimSpace(why + " (error: " + t.Error + ")")
					}
					if t.DeadLetterID != "" {
						why += " [dead letter " + t.DeadLetterID + "]"
					}
					row(tw, t.ID, t.State, t.Attempts, up, agoPtr(t.StartedAt), agoPtr(t.EndedAt), dash(why))
				}
				if unknown {
					row(tw)
					row(tw, "(upstream ?: the run was stored before runs kept their DAG's edges, and this server does not have the DAG)")
				}
			})
		}),
	}
	runs.AddCommand(list, show)
	cmd.AddCommand(runs)
	return cmd
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
