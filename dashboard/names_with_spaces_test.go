package dashboard_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/backstophq/backstop/admin"
	"github.com/backstophq/backstop/dashboard"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store/sqlite"
	"github.com/backstophq/backstop/workflow"
	"github.com/backstophq/backstop/workflow/wfsqlite"
)

// TestSearchKeepsTheSpacesOfAName: a destination, stream, type or DAG ID
// may begin or end with spaces (the API, the engine and plain SQL take
// them). The messages and workflows pages trimmed what was typed in their
// search boxes, so searching the stream " s " listed the 2 messages of the
// stream "s", another stream, and never the one of " s "; the DAG " etl "
// likewise listed the 2 runs of "etl". Names are now searched as typed;
// only the message id is trimmed.
func TestSearchKeepsTheSpacesOfAName(t *testing.T) {
	b := browser(t)
	ctx := context.Background()
	st := openSQLite(t)
	for _, m := range []*outbox.Message{
		{Destination: "d", Stream: " s ", Type: "t", Payload: []byte(`{}`)},
		{Destination: "d", Stream: "s", Type: "t", Payload: []byte(`{}`)},
		{Destination: "d", Stream: "s", Type: "t", Payload: []byte(`{}`)},
	} {
		if err := st.Enqueue(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	ws, err := wfsqlite.New(ctx, st.(*sqlite.Store))
	if err != nil {
		t.Fatal(err)
	}
	eng, err := workflow.NewEngine(ws, workflow.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ok := func(context.Context, *workflow.TaskContext) error { return nil }
	for dag, runs := range map[string][]string{" etl ": {"spaced-1"}, "etl": {"plain-1", "plain-2"}} {
		d, err := workflow.NewDAG(dag, nil, workflow.Task{ID: "a", Run: ok})
		if err != nil {
			t.Fatal(err)
		}
		if err := eng.Register(d); err != nil {
			t.Fatal(err)
		}
		for _, id := range runs {
			if _, err := eng.Start(ctx, dag, workflow.RunOptions{ID: id}); err != nil {
				t.Fatal(err)
			}
		}
	}
	api, err := admin.New(admin.Config{
		Store:     st,
		Tokens:    []admin.Token{{Name: "wallboard", Secret: readToken, Role: admin.RoleRead}},
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		Workflows: &admin.Workflows{Store: ws, List: admin.SQLiteRuns(st.(*sqlite.Store))},
	})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", api.Handler())
	mux.Handle("/", dashboard.Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	tb := (&still{st: st, url: srv.URL}).signedIn(t, b)

	for _, c := range []struct{ page, field, typed, all, want, cell string }{
		{"messages", "stream", " s ", "3 messages", "1 message.", "main table tbody tr td:nth-child(3)"},
		{"workflows", "dag_id", " etl ", "3 runs", "1 run.", "main table tbody tr td:nth-child(2)"},
	} {
		tb.page(c.page)
		tb.until(c.page+" lists everything", `document.getElementById('content').textContent.includes('`+c.all+`')`)
		tb.do("search "+c.field+" '"+c.typed+"'",
			chromedp.SendKeys(chromedp.CSS(`form.filters input[name=`+c.field+`]`), c.typed),
			chromedp.Click(chromedp.CSS(`form.filters button[type=submit]`)),
		)
		tb.until("the search answers", `!document.getElementById('content').textContent.includes('`+c.all+`')`)
		if got := eval[string](tb, `document.querySelector('main p[aria-live]').textContent`); got != c.want {
			t.Errorf("%s: searching %s %q says %q, want %q", c.page, c.field, c.typed, got, c.want)
		}
		if got := eval[string](tb, `document.querySelector('`+c.cell+`').textContent`); got != c.typed {
			t.Errorf("%s: the row found has %s %q, want %q", c.page, c.field, got, c.typed)
		}
	}
}
