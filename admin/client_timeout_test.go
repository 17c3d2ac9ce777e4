package admin_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop/admin"
	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/store/sqlite"
)

// silentServer accepts connections and answers each with greeting, then
// nothing, holding it open until the test ends.
func silentServer(t *testing.T, greeting string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { close(done); ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				_, _ = c.Read(buf) // the request
				_, _ = c.Write([]byte(greeting))
				<-done
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// TestClientGivesUpOnASilentServer: a server that takes the connection
// and never answers, or sends its headers and then stalls in the body,
// ends the request after Client.Timeout with an error saying so. The
// client waited for ever (backstop dlq list --server hung, no line of
// output).
func TestClientGivesUpOnASilentServer(t *testing.T) {
	t.Parallel()
	for name, greeting := range map[string]string{
		"nothing":      "",
		"headers only": "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"items\":",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := &admin.Client{BaseURL: silentServer(t, greeting), Token: operateToken, Timeout: 200 * time.Millisecond}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // a safety net only
			defer cancel()
			_, err := c.DeadLetters(ctx, nil)
			var na *admin.NoAnswerError
			if !errors.As(err, &na) || !errors.Is(err, admin.ErrNoAnswer) {
				t.Fatalf("DeadLetters from a silent server: %v (safety net reached: %v), want a *NoAnswerError", err, ctx.Err())
			}
			if na.Timeout != c.Timeout || na.Path != "/v1/dlq" || !strings.Contains(err.Error(), "did not answer within 200ms") {
				t.Fatalf("error %q (%+v), want it to name the request and the timeout", err, na)
			}
		})
	}
}

// paceStore is a SQLite store whose dead-letter listing waits, for each
// page, for the client to have received reports progress reports: a
// bulk action far longer than the client's Timeout, which the server
// works on all along.
type paceStore struct {
	*sqlite.Store
	progress <-chan time.Time
	reports  int
}

func (p *paceStore) DLQ() dlq.Operator { return &paceDLQ{Operator: p.Store.DLQ(), p: p} }

type paceDLQ struct {
	dlq.Operator
	p *paceStore
}

func (q *paceDLQ) List(ctx context.Context, f *dlq.Filters) ([]*dlq.Entry, error) {
	for range q.p.reports {
		select {
		case <-q.p.progress:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return q.p.Store.DLQ().List(ctx, f)
}

// TestLongBulkActionOutlastsTheClientsTimeout: a bulk action that takes
// many times the client's Timeout is not cut while the server works on
// it: the server reports progress (102 Processing) and each report starts
// the client's wait again.
func TestLongBulkActionOutlastsTheClientsTimeout(t *testing.T) {
	t.Parallel()
	sq := openSQLite(t)
	fill(t, sq, 2, 16)
	progress := make(chan time.Time, 1000)
	const timeout = time.Second
	// Each page waits for 15 reports, one every timeout/10: one and a
	// half times the client's Timeout a page, three pages. A report may
	// come most of a Timeout late (a loaded machine) without a failure.
	st := &paceStore{Store: sq, progress: progress, reports: 15}
	srv, err := admin.New(admin.Config{
		Store: st, BulkPage: 1, ProgressInterval: timeout / 10,
		Tokens: []admin.Token{{Name: "ops", Secret: operateToken, Role: admin.RoleOperate}},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	c := &admin.Client{BaseURL: hs.URL, Token: operateToken, Timeout: timeout}
	var reports atomic.Int64
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		Got1xxResponse: func(code int, _ textproto.MIMEHeader) error {
			if code == http.StatusProcessing {
				reports.Add(1)
				progress <- time.Time{}
			}
			return nil
		},
	})
	start := time.Now()
	res, err := c.Bulk(ctx, "resolve", admin.BulkRequest{Filter: admin.Filter{Destination: "billing"}, Notes: "long"})
	if err != nil {
		t.Fatalf("bulk resolve after %s and %d progress reports: %v", time.Since(start), reports.Load(), err)
	}
	if res.Count != 2 {
		t.Fatalf("resolved %d entries, want 2", res.Count)
	}
	if took := time.Since(start); took < 2*timeout {
		t.Fatalf("the action took %s, less than twice the client's Timeout: it proves nothing", took)
	}
}

// TestNoProgressReportUnasked: a client that does not ask for progress
// reports (any client but admin.Client with a Timeout: some take the first
// status line they read for the answer) gets none, only the answer.
func TestNoProgressReportUnasked(t *testing.T) {
	t.Parallel()
	sq := openSQLite(t)
	fill(t, sq, 2, 16)
	// The page lasts the time of 50 reports of a server that sent them.
	st := &paceStore{Store: sq, progress: time.After(50 * time.Millisecond), reports: 1}
	srv, err := admin.New(admin.Config{
		Store: st, ProgressInterval: time.Millisecond,
		Tokens: []admin.Token{{Name: "ops", Secret: operateToken, Role: admin.RoleOperate}},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	var got atomic.Int64
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		Got1xxResponse: func(int, textproto.MIMEHeader) error { got.Add(1); return nil },
	})
	c := &admin.Client{BaseURL: hs.URL, Token: operateToken} // no Timeout: does not ask
	if _, err := c.Bulk(ctx, "resolve", admin.BulkRequest{Filter: admin.Filter{Destination: "billing"}, DryRun: true}); err != nil {
		t.Fatal(err)
	}
	if n := got.Load(); n != 0 {
		t.Fatalf("%d informational answers to a client that did not ask for them", n)
	}
}
