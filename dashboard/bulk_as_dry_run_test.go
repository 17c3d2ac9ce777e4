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
	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/outbox"
)

// TestBulkActionDoesWhatItsDryRunShowed: the bulk dialog shows a dry run
// ("Dry run: 3 entries would be deleted", a sample, a button "Delete 3
// entries") and, once confirmed, sent the filter again: the entries
// dead-lettered in between matched it too, and were deleted without the
// operator having seen them (the page said "delete: 5 entries done"). The
// dry run now says up to when it looked (as_of) and the confirmed action
// takes only entries dead-lettered before then.
func TestBulkActionDoesWhatItsDryRunShowed(t *testing.T) {
	b := browser(t)
	st := openSQLite(t)
	api, err := admin.New(admin.Config{
		Store:  st,
		Tokens: []admin.Token{{Name: "ops", Secret: operateToken, Role: admin.RoleOperate}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", api.Handler())
	mux.Handle("/", dashboard.Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	ctx := context.Background()
	park := func(n int) {
		for range n {
			m := &outbox.Message{Destination: "orders", Type: "t", Payload: []byte(`{}`)}
			if err := st.Enqueue(ctx, m); err != nil {
				t.Fatal(err)
			}
			if err := st.DeadLetter(ctx, m.ID, "refused"); err != nil {
				t.Fatal(err)
			}
		}
	}
	park(3)
	tb := newTab(t, b, srv.URL, false)
	tb.open()
	tb.signIn(operateToken, "operate")
	tb.page("dead-letters")
	tb.until("the entries show", `document.querySelectorAll('article.group').length === 1`)
	tb.do("bulk delete", chromedp.Click(chromedp.CSS(`main .panel button[data-bulk=delete]`)))
	tb.until("the dry run counts", `document.querySelector('#dialog [data-dry-count]')?.dataset.dryCount === '3'`)
	// Two more failures while the operator reads the dry run.
	park(2)
	tb.confirm()
	tb.until("the action is reported", `(document.getElementById('status').textContent || '').includes('done')`)
	left, err := st.DLQ().List(ctx, &dlq.Filters{})
	if err != nil {
		t.Fatal(err)
	}
	if said := eval[string](tb, `document.getElementById('status').textContent`); len(left) != 2 {
		t.Errorf("the dry run showed 3 entries to delete; after the confirmation %d of 5 are left (%q)", len(left), said)
	}
}
