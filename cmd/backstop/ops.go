package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/backstophq/backstop/admin"
	"github.com/backstophq/backstop/outbox"
)

// action wraps an operator command: connect, run, explain failures. It
// refuses --server with --db: the command worked on the store and ignored
// the server. (BACKSTOP_SERVER in the environment gives way to --db.)
func (g *globals) action(fn func(ctx context.Context, c *admin.Client, p printer, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if g.db != "" && cmd.Flags().Changed("server") {
			return errors.New("give --server (a running server's admin API) or --db (a store), not both")
		}
		c, closeFn, err := g.connect(cmd.Context())
		if err != nil {
			return err
		}
		defer closeFn()
		return explain(fn(cmd.Context(), c, g.printer(cmd.OutOrStdout()), args), g)
	}
}

func newEnqueueCmd(g *globals) *cobra.Command {
	var req admin.EnqueueRequest
	var payload, payloadFile, scheduled string
	var headers []string
	cmd := &cobra.Command{
		Use:   "enqueue",
		Short: "Write a message to the outbox (to a destination, or a topic the routes fan out)",
		Args:  cobra.NoArgs,
		RunE: g.action(func(ctx context.Context, c *admin.Client, p printer, _ []string) error {
			if payloadFile != "" {
				b, err := readPayloadFile(payloadFile)
				if err != nil {
					return err
				}
				payload = string(b)
			}
			if payload != "" {
				req.Payload, req.PayloadBase64 = payloadOf([]byte(payload))
			}
			for _, h := range headers {
				k, v, ok := strings.Cut(h, "=")
				if !ok {
					return fmt.Errorf("--header %q: want Name=value", h)
				}
				if req.Headers == nil {
					req.Headers = map[string]string{}
				}
				req.Headers[k] = v
			}
			if scheduled != "" {
				t, err := parseTime(scheduled)
				if err != nil {
					return fmt.Errorf("--scheduled-for: %w", err)
				}
				req.ScheduledFor = &t
			}
			res, err := c.Enqueue(ctx, req)
			if err != nil {
				return err
			}
			return p.value(res, func(tw *tabwriter.Writer) {
				what := "enqueued"
				if res.Duplicate {
					what = "duplicate of"
				}
				for _, id := range res.IDs {
					row(tw, what, id)
				}
			})
		}),
	}
	f := cmd.Flags()
	f.StringVar(&req.Destination, "destination", "", "the destination")
	f.StringVar(&req.Topic, "topic", "", "a topic, routed by the config's routes (instead of --destination)")
	f.StringVar(&req.Type, "type", "", "the message type, such as order.created (required)")
	f.StringVar(&req.Stream, "stream", "", "the stream: messages of one stream are delivered in order")
	f.StringVar(&payload, "payload", "", "the payload (JSON, or any text), written byte for byte")
	f.StringVar(&payloadFile, "payload-file", "", "read the payload from a file, written byte for byte")
	f.StringArrayVar(&headers, "header", nil, "a header Name=value (repeatable)")
	f.StringVar(&req.IdempotencyKey, "idempotency-key", "", "write once per key: a repeat returns the first ids")
	f.StringVar(&scheduled, "scheduled-for", "", "first delivery no earlier than this (RFC 3339 or a duration from now)")
	cmd.MarkFlagsMutuallyExclusive("payload", "payload-file")
	return cmd
}

// readPayloadFile reads the payload in path, refusing one larger than a
// message may hold (outbox.DefaultMaxPayloadBytes) after reading at most a
// byte more, not the whole file.
func readPayloadFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--payload-file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, outbox.DefaultMaxPayloadBytes+1))
	if err != nil {
		return nil, fmt.Errorf("--payload-file: %w", err)
	}
	if len(b) > outbox.DefaultMaxPayloadBytes {
		return nil, fmt.Errorf("--payload-file %s: larger than the %d bytes a message's payload may hold", path, outbox.DefaultMaxPayloadBytes)
	}
	return b, nil
}

// payloadOf returns how an enqueue request carries p so that the message
// holds p byte for byte: as the JSON value when p is JSON that encoding/json
// sends unchanged, else in base64. encoding/json compacts a JSON value and
// escapes "<", ">", "&", U+2028 and U+2029 in it, so a pretty-printed file,
// or JSON holding any of those, would be written altered.
func payloadOf(p []byte) (json.RawMessage, string) {
	if json.Valid(p) {
		if sent, err := json.Marshal(json.RawMessage(p)); err == nil && bytes.Equal(sent, p) {
			return json.RawMessage(p), ""
		}
	}
	return nil, encodeBase64(p)
}

// parseTime reads an RFC 3339 time, or a duration from now (for
// --scheduled-for; a negative one is in the past).
func parseTime(s string) (time.Time, error) {
	return parseAt(s, func(d time.Duration) time.Duration { return d }, "a duration")
}

// parseAgo reads an RFC 3339 time, or a duration ago whatever its sign:
// "720h" and "-720h" are both thirty days ago. The flags that take it
// (--after, --before, --since) select what was dead-lettered in the past,
// where a time from now would select everything or nothing: "dlq delete
// --before 720h" meant before thirty days from now, every entry.
func parseAgo(s string) (time.Time, error) {
	return parseAt(s, func(d time.Duration) time.Duration { return -d.Abs() }, "a duration ago")
}

// parseAt reads an RFC 3339 time, or a duration d as now plus offset(d);
// what names the duration in the error.
func parseAt(s string, offset func(time.Duration) time.Duration, what string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		return time.Now().Add(offset(d)), nil
	}
	return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time nor %s", s, what)
}

func messageTable(tw *tabwriter.Writer, items []admin.Message) {
	row(tw, "ID", "DESTINATION", "STREAM", "SEQ", "TYPE", "STATUS", "ATTEMPTS", "REASON", "CREATED")
	for _, m := range items {
		row(tw, m.ID, m.Destination, m.Stream, m.Seq, m.Type, m.Status, m.Attempts, m.FailureReason, ago(m.CreatedAt))
	}
}

func newMessagesCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "messages", Short: "List, show and act on outbox messages"}
	var f struct{ destination, stream, typ, state, cursor string }
	var limit int
	list := &cobra.Command{
		Use: "list", Short: "List messages in stream order", Args: cobra.NoArgs,
		RunE: g.action(func(ctx context.Context, c *admin.Client, p printer, _ []string) error {
			q := url.Values{}
			setQ(q, "destination", f.destination, "stream", f.stream, "type", f.typ, "state", f.state, "cursor", f.cursor)
			q.Set("limit", fmt.Sprint(limit))
			if !p.json {
				q.Set("payload", "false") // the table has no payload column
			}
			res, err := c.Messages(ctx, q)
			if err != nil {
				return err
			}
			return p.value(res, func(tw *tabwriter.Writer) {
				messageTable(tw, res.Items)
				if res.NextCursor != "" {
					row(tw, "(more: --cursor "+res.NextCursor+")")
				}
			})
		}),
	}
	lf := list.Flags()
	lf.StringVar(&f.destination, "destination", "", "only this destination")
	lf.StringVar(&f.stream, "stream", "", "only this stream")
	lf.StringVar(&f.typ, "type", "", "only this type")
	lf.StringVar(&f.state, "state", "", "ready, retrying, leased, dead_lettered or delivered")
	lf.StringVar(&f.cursor, "cursor", "", "continue after a previous page")
	lf.IntVar(&limit, "limit", 100, "at most this many (1-1000)")
	show := &cobra.Command{
		Use: "show ID", Short: "Show a message", Args: cobra.ExactArgs(1),
		RunE: g.action(func(ctx context.Context, c *admin.Client, p printer, args []string) error {
			m, err := c.Message(ctx, args[0])
			if err != nil {
				return err
			}
			return p.value(m, func(tw *tabwriter.Writer) {
				for _, kv := range [][2]any{{"id", m.ID}, {"destination", m.Destination}, {"stream", m.Stream},
					{"seq", m.Seq}, {"type", m.Type}, {"status", m.Status}, {"attempts", m.Attempts},
					{"failure reason", m.FailureReason}, {"error", m.Error}, {"fingerprint", m.Fingerprint},
					{"scheduled for", agoPtr(m.ScheduledFor)}, {"leased by", m.InstanceID}, {"lease expiry", agoPtr(m.LeaseExpiry)},
					{"created", ago(m.CreatedAt)}, {"dead-lettered", agoPtr(m.DeadLetteredAt)},
					{"payload", short(string(m.Payload)+m.PayloadBase64, 200)}} {
					row(tw, kv[0], kv[1])
				}
				for _, h := range m.History {
					row(tw, "history", fmt.Sprintf("%s %s by %s: %s", ago(h.At), h.Action, h.Actor, h.Notes))
				}
			})
		}),
	}
	cmd.AddCommand(list, show)
	for _, a := range []struct{ name, short string }{
		{"retry-now", "Make a waiting message due now"},
		{"reset", "Set a message's attempts to zero"},
		{"cancel", "Delete an undelivered message: it will never be delivered"},
		{"dead-letter", "Move a message to the dead-letter queue"},
	} {
		var req admin.ActionRequest
		c := &cobra.Command{
			Use: a.name + " ID", Short: a.short, Args: cobra.ExactArgs(1),
			RunE: g.action(func(ctx context.Context, c *admin.Client, p printer, args []string) error {
				res, err := c.MessageAction(ctx, args[0], a.name, req)
				return printResult(p, res, err)
			}),
		}
		c.Flags().StringVar(&req.Notes, "notes", "", "why (kept in the audit log)")
		if a.name == "dead-letter" {
			c.Flags().StringVar(&req.Reason, "reason", "", "why, in words: kept as the dead letter's error text (its failure reason is PoisonMessage, as for any message dead-lettered by hand)")
		}
		cmd.AddCommand(c)
	}
	return cmd
}

func printResult(p printer, res admin.ActionResult, err error) error {
	if err != nil {
		return err
	}
	return p.value(res, func(tw *tabwriter.Writer) {
		row(tw, res.Action, res.Target, fmt.Sprintf("%d affected", res.Count), fmt.Sprintf("audit #%d", res.AuditID))
	})
}

func setQ(q url.Values, kv ...string) {
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			q.Set(kv[i], kv[i+1])
		}
	}
}

func newStreamsCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "streams", Short: "Show why a stream is blocked, and release it"}
	show := &cobra.Command{
		Use: "show DESTINATION STREAM", Short: "Show a stream's head and why it is blocked, in words", Args: cobra.ExactArgs(2),
		RunE: g.action(func(ctx context.Context, c *admin.Client, p printer, args []string) error {
			get := c.Stream
			if !p.json {
				get = c.StreamWithoutPayload // the table shows no payload
			}
			s, err := get(ctx, args[0], args[1])
			if err != nil {
				return err
			}
			return p.value(s, func(tw *tabwriter.Writer) {
				row(tw, "stream", s.Destination+"/"+s.Stream)
				row(tw, "pending", s.Pending)
				row(tw, "blocked", s.Blocked)
				row(tw, "why", s.Why)
				if s.Head != nil {
					row(tw, "head", fmt.Sprintf("%s (seq %d, %s, %d attempts)", s.Head.ID, s.Head.Seq, s.Head.Status, s.Head.Attempts))
				}
			})
		}),
	}
	var notes string
	release := &cobra.Command{
		Use: "release DESTINATION STREAM", Short: "Let a strict stream's later messages go past its failed ones", Args: cobra.ExactArgs(2),
		RunE: g.action(func(ctx context.Context, c *admin.Client, p printer, args []string) error {
			res, err := c.ReleaseStream(ctx, args[0], args[1], notes)
			return printResult(p, res, err)
		}),
	}
	release.Flags().StringVar(&notes, "notes", "", "why (kept in the audit log)")
	cmd.AddCommand(show, release)
	return cmd
}

func newStatsCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "stats", Short: "Retries, failure reasons, backlog, poison candidates, DLQ depth, blocked streams", Args: cobra.NoArgs,
		RunE: g.action(func(ctx context.Context, c *admin.Client, p printer, _ []string) error {
			s, err := c.Stats(ctx)
			if err != nil {
				return err
			}
			return p.value(s, func(tw *tabwriter.Writer) {
				row(tw, "dlq depth", s.DLQDepth)
				row(tw, "dlq oldest", (time.Duration(s.DLQOldestAgeSecs) * time.Second).String())
				row(tw, "blocked streams", s.BlockedStreams)
				row(tw, "scheduled backlog", s.ScheduledBacklog.Count, "next "+agoPtr(s.ScheduledBacklog.Next))
				row(tw, "poison candidates", len(s.PoisonCandidates))
				for _, d := range s.RetryDistribution {
					row(tw, "failed with attempts", d.Attempts, d.Count)
				}
				for _, r := range s.FailureReasons {
					row(tw, "failure reason", r.Reason, r.Count)
				}
			})
		}),
	}
}

func newBreakersCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "breakers", Short: "The destinations' circuit breakers", Args: cobra.NoArgs,
		RunE: g.action(func(ctx context.Context, c *admin.Client, p printer, _ []string) error {
			b, err := c.Breakers(ctx)
			if err != nil {
				return err
			}
			return p.value(b, func(tw *tabwriter.Writer) {
				row(tw, "DESTINATION", "STATE", "OPENINGS", "DELIVERED", "RELEASED", "FAILED")
				for _, x := range b.Items {
					row(tw, x.Destination, x.State, x.Openings, x.Delivered, x.Released, x.Failed)
				}
			})
		}),
	}
}

func newAuditCmd(g *globals) *cobra.Command {
	var target, action, cursor string
	cmd := &cobra.Command{
		Use: "audit", Short: "Operators' actions, newest first", Args: cobra.NoArgs,
		RunE: g.action(func(ctx context.Context, c *admin.Client, p printer, _ []string) error {
			q := url.Values{}
			setQ(q, "target", target, "action", action, "cursor", cursor)
			l, err := c.Audit(ctx, q)
			if err != nil {
				return err
			}
			return p.value(l, func(tw *tabwriter.Writer) {
				row(tw, "ID", "AT", "ACTOR", "ACTION", "TARGET", "COUNT", "FILTER", "NOTES")
				for _, r := range l.Items {
					row(tw, r.ID, ago(r.At), r.Actor, r.Action, r.Target, r.Count, r.Filter, short(r.Notes, 60))
				}
			})
		}),
	}
	cmd.Flags().StringVar(&target, "target", "", "only actions on this message, entry or destination/stream")
	cmd.Flags().StringVar(&action, "action", "", "only this action")
	cmd.Flags().StringVar(&cursor, "cursor", "", "continue after a previous page")
	return cmd
}
