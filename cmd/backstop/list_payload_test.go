package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/admin"
	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/sqlite"
)

// countingWriter counts the bytes of the answers to one path.
type countingWriter struct {
	http.ResponseWriter
	n *int64
}

func (c countingWriter) Write(p []byte) (int, error) {
	*c.n += int64(len(p))
	return c.ResponseWriter.Write(p)
}

// TestListTablesLeaveThePayloadsOnTheServer: dlq list and messages list
// print tables without a payload column, but asked the server for the
// payloads of every item listed: 6 items with binary payloads of 1 MiB
// (sent in base64) moved 8.4 MB to print a table of under 1 KB, so the
// default --limit of 100 moves about 140 MB and --limit 1000 over a
// gigabyte. The tables now ask for ?payload=false; --output json, which
// prints the items whole, still gets the payloads.
func TestListTablesLeaveThePayloadsOnTheServer(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "b.db"), store.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	big := bytes.Repeat([]byte{0xfe}, outbox.DefaultMaxPayloadBytes)
	const n = 6
	for i := range n {
		m := &outbox.Message{Destination: "billing", Type: "t", Stream: "s", Payload: big}
		if err := st.Enqueue(ctx, m); err != nil {
			t.Fatal(err)
		}
		e := &dlq.Entry{MessageID: uuid.NewString(), Destination: "billing", Stream: "s", Type: "t", Payload: big,
			Reason: errorhandling.ReasonValidationFailure, ErrorMessage: "too big", FailureTime: time.Now().Add(time.Duration(i) * time.Millisecond)}
		if err := st.DLQ().Add(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	s, err := admin.New(admin.Config{Store: st, Tokens: []admin.Token{{Name: "ops", Secret: "operate-token-0123456789", Role: admin.RoleOperate}}})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	sent := map[string]*int64{}
	h := s.Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock() // one request at a time: the CLI sends one
		if sent[r.URL.Path] == nil {
			sent[r.URL.Path] = new(int64)
		}
		h.ServeHTTP(countingWriter{w, sent[r.URL.Path]}, r)
	}))
	defer srv.Close()
	t.Setenv("BACKSTOP_TOKEN", "operate-token-0123456789")
	for _, c := range []struct{ path, what string }{{"/v1/dlq", "dlq"}, {"/v1/messages", "messages"}} {
		out := mustCLI(t, "--server", srv.URL, c.what, "list")
		if lines := strings.Count(out, "\n"); lines != n+1 {
			t.Errorf("%s list printed %d lines, want %d:\n%.2000s", c.what, lines, n+1, out)
		}
		mu.Lock()
		got := *sent[c.path]
		mu.Unlock()
		if got > 1<<20 {
			t.Errorf("%s list: the server sent %d bytes to print a table of %d bytes", c.what, got, len(out))
		}
		// --output json prints the items whole, payloads included.
		var l struct {
			Items []struct {
				PayloadBase64 string `json:"payload_base64"`
			} `json:"items"`
		}
		if err := json.Unmarshal([]byte(mustCLI(t, "--server", srv.URL, "-o", "json", c.what, "list", "--limit", "1")), &l); err != nil {
			t.Fatal(err)
		}
		if len(l.Items) != 1 || len(l.Items[0].PayloadBase64) < len(big) {
			t.Errorf("%s list -o json lost the payload: %d items", c.what, len(l.Items))
		}
	}
	// streams show prints the head's id, seq, status and attempts: its
	// payload (1.4 MB in base64) stays on the server too.
	if out := mustCLI(t, "--server", srv.URL, "streams", "show", "billing", "s"); !strings.Contains(out, "head") {
		t.Errorf("streams show:\n%s", out)
	}
	mu.Lock()
	got := *sent["/v1/streams/billing/s"]
	mu.Unlock()
	if got > 64<<10 {
		t.Errorf("streams show: the server sent %d bytes", got)
	}
}
