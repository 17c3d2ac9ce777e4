package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/backstophq/backstop/admin"
)

func encodeBase64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// dlqFilter is the filter flags of the dlq commands.
type dlqFilter struct {
	destination, stream, messageID, reason, fingerprint, status, after, before string
	all                                                                        bool
}

func (f *dlqFilter) flags(fs *pflag.FlagSet, bulk bool) {
	fs.StringVar(&f.destination, "destination", "", "only this destination")
	fs.StringVar(&f.stream, "stream", "", "only this stream")
	fs.StringVar(&f.messageID, "message-id", "", "only the entries of this outbox message")
	fs.StringVar(&f.reason, "reason", "", "only this failure reason, such as ValidationFailure")
	fs.StringVar(&f.fingerprint, "fingerprint", "", "only entries failing this way")
	fs.StringVar(&f.status, "status", "", "pending, replayed or resolved")
	fs.StringVar(&f.after, "after", "", "dead-lettered at or after (RFC 3339, or a duration ago such as 2h)")
	fs.StringVar(&f.before, "before", "", "dead-lettered before (RFC 3339, or a duration ago such as 720h)")
	if bulk {
		fs.BoolVar(&f.all, "all", false, "act on every entry when no filter is given")
	}
}

func (f *dlqFilter) filter() (admin.Filter, error) {
	out := admin.Filter{Destination: f.destination, Stream: f.stream, MessageID: f.messageID, Reason: f.reason, Fingerprint: f.fingerprint, Status: f.status}
	for _, p := range []struct {
		flag, v string
		t       **time.Time
	}{{"after", f.after, &out.After}, {"before", f.before, &out.Before}} {
		if p.v == "" {
			continue
		}
		t, err := parseAgo(p.v)
		if err != nil {
			return out, fmt.Errorf("--%s: %w", p.flag, err)
		}
		*p.t = &t
	}
	return out, nil
}

func (f *dlqFilter) empty() bool {
	return f.destination == "" && f.stream == "" && f.messageID == "" && f.reason == "" && f.fingerprint == "" && f.status == "" && f.after == "" && f.before == ""
}

func entryTable(tw *tabwriter.Writer, items []admin.Entry) {
	row(tw, "ID", "DESTINATION", "STREAM", "SEQ", "TYPE", "REASON", "ATTEMPTS", "STATUS", "FAILED", "ERROR")
	for _, e := range items {
		row(tw, e.ID, e.Destination, e.Stream, e.Seq, e.Type, e.Reason, e.Attempts, e.Status, ago(e.FailureTime), short(e.Error, 60))
	}
}

func bulkTable(p printer, res admin.BulkResult, err error) error {
	if err != nil {
		return err
	}
	return p.value(res, func(tw *tabwriter.Writer) {
		verb := res.Action
		if res.DryRun {
			verb = "would " + verb
		}
		row(tw, fmt.Sprintf("%s %d entries", verb, res.Count))
		if len(res.Sample) > 0 {
			row(tw, "")
			entryTable(tw, res.Sample)
			if res.Count > len(res.Sample) {
				row(tw, fmt.Sprintf("... and %d more", res.Count-len(res.Sample)))
			}
		}
	})
}

func newDLQCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "dlq", Short: "Inspect, replay, resolve and delete dead letters, one or in bulk by filter"}
	var lf dlqFilter
	var cursor string
	var limit int
	list := &cobra.Command{
		Use: "list", Short: "List dead letters", Args: cobra.NoArgs,
		RunE: g.action(func(ctx context.Context, c *admin.Client, p printer, _ []string) error {
			f, err := lf.filter()
			if err != nil {
				return err
			}
			q := url.Values{}
			setQ(q, "destination", f.Destination, "stream", f.Stream, "message_id", f.MessageID, "reason", f.Reason, "fingerprint", f.Fingerprint,
				"status", f.Status, "cursor", cursor)
			if f.After != nil {
				q.Set("after", f.After.Format(time.RFC3339Nano))
			}
			if f.Before != nil {
				q.Set("before", f.Before.Format(time.RFC3339Nano))
			}
			q.Set("limit", fmt.Sprint(limit))
			if !p.json {
				q.Set("payload", "false") // the table has no payload column
			}
			l, err := c.DeadLetters(ctx, q)
			if err != nil {
				return err
			}
			return p.value(l, func(tw *tabwriter.Writer) {
				entryTable(tw, l.Items)
				if l.NextCursor != "" {
					row(tw, "(more: --cursor "+l.NextCursor+")")
				}
			})
		}),
	}
	lf.flags(list.Flags(), false)
	list.Flags().StringVar(&cursor, "cursor", "", "continue after a previous page")
	list.Flags().IntVar(&limit, "limit", 100, "at most this many (1-1000)")

	show := &cobra.Command{
		Use: "show ID", Short: "Show a dead letter with its failure and its history", Args: cobra.ExactArgs(1),
		RunE: g.action(func(ctx context.Context, c *admin.Client, p printer, args []string) error {
			e, err := c.DeadLetter(ctx, args[0])
			if err != nil {
				return err
			}
			return p.value(e, func(tw *tabwriter.Writer) {
				for _, kv := range [][2]any{{"id", e.ID}, {"message", e.MessageID}, {"destination", e.Destination},
					{"stream", e.Stream}, {"seq", e.Seq}, {"type", e.Type}, {"reason", e.Reason}, {"error", e.Error},
					{"fingerprint", e.Fingerprint}, {"attempts", e.Attempts}, {"first failure", agoPtr(e.FirstFailureTime)},
					{"last attempt", agoPtr(e.LastAttemptTime)}, {"dead-lettered", ago(e.FailureTime)}, {"status", e.Status},
					{"resolved by", e.ResolvedBy}, {"resolution notes", e.ResolutionNotes}, {"replayed by", e.ReplayedBy},
					{"replay notes", e.ReplayNotes}, {"payload", short(string(e.Payload)+e.PayloadBase64, 200)}} {
					row(tw, kv[0], kv[1])
				}
				for _, h := range e.History {
					row(tw, "history", fmt.Sprintf("%s %s by %s: %s", ago(h.At), h.Action, h.Actor, h.Notes))
				}
			})
		}),
	}
	cmd.AddCommand(list, show, newBulkCmd(g, "replay", "Replay one entry by ID, or every pending entry matching the filter"),
		newBulkCmd(g, "resolve", "Resolve one entry by ID, or every entry matching the filter, with notes"),
		newBulkCmd(g, "delete", "Delete one entry by ID, or every entry matching the filter"),
		newRecoverCmd(g), newPurgeCmd(g))
	return cmd
}

func newBulkCmd(g *globals, action, short string) *cobra.Command {
	var f dlqFilter
	var dryRun bool
	var notes string
	cmd := &cobra.Command{
		Use: action + " [ID]", Short: short, Args: cobra.MaximumNArgs(1),
		RunE: g.action(func(ctx context.Context, c *admin.Client, p printer, args []string) error {
			if len(args) == 1 {
				if !f.empty() || dryRun || f.all {
					return errors.New("give an ID or filters (--destination, --reason... or --all, with --dry-run), not both")
				}
				res, err := c.EntryAction(ctx, args[0], action, notes)
				return printResult(p, res, err)
			}
			if f.empty() && !f.all {
				return fmt.Errorf("%s needs an ID, a filter (--destination, --reason...) or --all", action)
			}
			filter, err := f.filter()
			if err != nil {
				return err
			}
			res, err := c.Bulk(ctx, action, admin.BulkRequest{Filter: filter, DryRun: dryRun, Notes: notes, All: f.all})
			return bulkTable(p, res, err)
		}),
	}
	f.flags(cmd.Flags(), true)
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "change nothing: count the entries and show a sample")
	cmd.Flags().StringVar(&notes, "notes", "", "why (kept on the entries and in the audit log)")
	return cmd
}

func newRecoverCmd(g *globals) *cobra.Command {
	var req admin.RecoverRequest
	var since string
	cmd := &cobra.Command{
		Use: "recover", Short: "Replay everything dead-lettered for a destination since a time, in stream order", Args: cobra.NoArgs,
		RunE: g.action(func(ctx context.Context, c *admin.Client, p printer, _ []string) error {
			t, err := parseAgo(since)
			if err != nil {
				return fmt.Errorf("--since: %w", err)
			}
			req.Since = &t
			res, err := c.Recover(ctx, req)
			return bulkTable(p, res, err)
		}),
	}
	cmd.Flags().StringVar(&req.Destination, "destination", "", "the destination (required)")
	cmd.Flags().StringVar(&since, "since", "", "RFC 3339 time, or a duration ago such as 2h (required)")
	cmd.Flags().BoolVar(&req.DryRun, "dry-run", false, "change nothing: count and show a sample")
	cmd.Flags().StringVar(&req.Notes, "notes", "", "why")
	_ = cmd.MarkFlagRequired("destination")
	_ = cmd.MarkFlagRequired("since")
	return cmd
}

func newPurgeCmd(g *globals) *cobra.Command {
	var req admin.PurgeRequest
	cmd := &cobra.Command{
		Use: "purge", Short: "Remove dead letters older than a duration", Args: cobra.NoArgs,
		RunE: g.action(func(ctx context.Context, c *admin.Client, p printer, _ []string) error {
			res, err := c.Purge(ctx, req)
			return bulkTable(p, res, err)
		}),
	}
	cmd.Flags().StringVar(&req.OlderThan, "older-than", "", "a duration such as 720h (required)")
	cmd.Flags().BoolVar(&req.DryRun, "dry-run", false, "change nothing: count and show a sample")
	cmd.Flags().StringVar(&req.Notes, "notes", "", "why")
	_ = cmd.MarkFlagRequired("older-than")
	return cmd
}
