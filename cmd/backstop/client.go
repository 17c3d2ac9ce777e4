package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/backstophq/backstop/admin"
	"github.com/backstophq/backstop/internal/termtext"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
)

// DefaultServer is the admin API an operator command talks to when neither
// --server, BACKSTOP_SERVER nor --db is given.
const DefaultServer = "http://127.0.0.1:8080"

// cliToken is the in-process token of --db mode.
const cliToken = "in-process-cli-token"

// connect returns a client of the admin API: a server's (--server, token
// from BACKSTOP_TOKEN) or, with --db, the API run in this process on the
// store, recorded in the audit log under cli:$USER.
func (g *globals) connect(ctx context.Context) (*admin.Client, func(), error) {
	if g.output != "table" && g.output != "json" {
		return nil, nil, fmt.Errorf("--output must be table or json, not %q", g.output)
	}
	if g.db == "" {
		server := g.server
		if server == "" {
			server = DefaultServer
		}
		if g.timeout < 0 {
			return nil, nil, fmt.Errorf("--timeout must be a positive duration such as 1m, or 0 for no limit, not %s", g.timeout)
		}
		return &admin.Client{BaseURL: server, Token: os.Getenv("BACKSTOP_TOKEN"), Timeout: g.timeout}, func() {}, nil
	}
	sc := store.Config{TablePrefix: g.prefix}
	if err := sc.Validate(); err != nil {
		return nil, nil, fmt.Errorf("--table-prefix: %w", err)
	}
	if err := checkTables(ctx, g.db, sc.WithDefaults().TablePrefix); err != nil {
		return nil, nil, err
	}
	user := os.Getenv("USER")
	if user == "" {
		user = "unknown"
	}
	token := admin.Token{Name: "cli:" + user, Secret: cliToken, Role: admin.RoleOperate}
	st, err := openStore(ctx, g.db, sc)
	if errors.Is(err, sqlite.ErrReadOnly) {
		if err := noDatabase(g.db); err != nil {
			return nil, nil, err
		}
		// A server's database this user may read but not write: read it.
		st, err = sqlite.Open(ctx, strings.TrimPrefix(g.db, "sqlite:"), sc, sqlite.ReadOnly())
		if err == nil {
			fmt.Fprintf(os.Stderr, "backstop: %s cannot be written by this user: opened read-only, commands that change it are refused\n", g.db)
			token.Name += " (read-only database)"
			token.Role = admin.RoleRead
		}
	}
	if err != nil {
		return nil, nil, err
	}
	wf, err := workflowsOf(ctx, st)
	if err != nil {
		st.Close()
		return nil, nil, err
	}
	srv, err := admin.New(admin.Config{
		Store:     st,
		Tokens:    []admin.Token{token},
		Logger:    slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
		Workflows: wf,
	})
	if err != nil {
		st.Close()
		return nil, nil, err
	}
	c := &admin.Client{BaseURL: "http://in-process", Token: cliToken,
		HTTPClient: &http.Client{Transport: admin.HandlerTransport{Handler: srv.Handler()}}}
	return c, func() { st.Close() }, nil
}

// noDatabase says why --db sqlite:PATH, which could not be opened for
// writing, is not there to be read either: its file or its directory does
// not exist (most often a typo). It returns nil when the file exists. Such a
// path was taken for a database this user may not write and reported as
// "read PATH read-only: unable to open database file".
func noDatabase(db string) error {
	file, _ := sqlite.ReadOnlyURI(strings.TrimPrefix(db, "sqlite:"))
	_, err := os.Stat(file)
	if !errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	dir := filepath.Dir(file)
	if _, derr := os.Stat(dir); derr != nil {
		return fmt.Errorf("--db %s: no database there, and its directory cannot be used: %w", db, derr)
	}
	return fmt.Errorf("--db %s: no database there, and this user cannot create one in %s", db, dir)
}

// printer writes results as aligned tables or JSON.
type printer struct {
	out  io.Writer
	json bool
}

func (g *globals) printer(w io.Writer) printer { return printer{out: w, json: g.output == "json"} }

// value prints v as JSON, or with table when printing for people.
func (p printer) value(v any, table func(tw *tabwriter.Writer)) error {
	if p.json {
		enc := json.NewEncoder(p.out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	tw := tabwriter.NewWriter(p.out, 0, 0, 2, ' ', 0)
	table(tw)
	return tw.Flush()
}

// row writes one tab-separated row; control characters are shown escaped
// so that a stored value cannot rewrite the operator's terminal, and
// invisible ones (format characters: bidirectional controls, zero-width
// ones; line and paragraph separators) so that it cannot hide or reorder
// what the operator reads.
func row(tw io.Writer, cells ...any) {
	parts := make([]string, len(cells))
	for i, c := range cells {
		parts[i] = termtext.Escape(fmt.Sprint(c))
	}
	fmt.Fprintln(tw, strings.Join(parts, "\t"))
}

func ago(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

func agoPtr(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return ago(*t)
}

func short(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// explain turns a connection failure into advice.
func explain(err error, g *globals) error {
	var p *admin.Problem
	if errors.As(err, &p) {
		if p.Status == http.StatusUnauthorized {
			return fmt.Errorf("%w (set BACKSTOP_TOKEN to an admin token of the server)", err)
		}
		return err
	}
	if errors.Is(err, admin.ErrNoAnswer) {
		return fmt.Errorf("%w (--timeout %s; is the server overloaded, or is --server the address of something else? a larger --timeout waits longer)", err, g.timeout)
	}
	if g.db == "" && err != nil && strings.Contains(err.Error(), "connection refused") {
		return fmt.Errorf("%w (is `backstop serve` running there? --server or BACKSTOP_SERVER names another, --db works on a store directly)", err)
	}
	return err
}
