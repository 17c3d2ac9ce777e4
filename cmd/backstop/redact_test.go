package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/backstophq/backstop/internal/config"
)

// TestDBFlagErrorHidesThePassword: a --db that is not a store's URL (a
// key=value connection string, a misspelt scheme) is refused without its
// password; the error quoted the whole value.
func TestDBFlagErrorHidesThePassword(t *testing.T) {
	for _, db := range []string{"host=127.0.0.1 user=u password=Sesame dbname=d", "postgress://u:Sesame@127.0.0.1/d"} {
		out, err := cli(t, "--db", db, "stats")
		if err == nil {
			t.Fatalf("stats --db %q: no error", db)
		}
		if strings.Contains(err.Error()+out, "Sesame") {
			t.Errorf("stats --db %q: the error %q shows the password", db, err)
		}
	}
}

// TestRedactDBHidesQueryPasswords: the database URL serve logs and
// migrate prints hides a password given as a query parameter, and one
// that keeps the URL from parsing; both were shown whole.
func TestRedactDBHidesQueryPasswords(t *testing.T) {
	for _, db := range []string{"postgres://u@127.0.0.1/d?password=Sesame&sslmode=disable", "postgres://u:Ses#ame@127.0.0.1/d"} {
		if got := redactDB(db); strings.Contains(got, "Sesame") || strings.Contains(got, "Ses#ame") {
			t.Errorf("redactDB(%q) = %q, shows the password", db, got)
		}
	}
}

// TestNATSSourceErrorHidesThePassword: a NATS source that cannot connect
// is reported (on /readyz, in the log) naming the server without the
// password of its URL; the error quoted the URL as configured.
func TestNATSSourceErrorHidesThePassword(t *testing.T) {
	t.Setenv("BACKSTOP_ADMIN_TOKEN", "")
	c, err := config.Parse([]byte(`listen: 127.0.0.1:0
destinations:
  - {name: a, type: webhook, url: 'http://127.0.0.1:1/'}
sources:
  - {inbox: in, type: nats, url: 'nats://bob:Sesame@127.0.0.1:1', stream: S, consumer: c, forward: {to: [a]}}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	c.DB = "sqlite:" + filepath.Join(t.TempDir(), "b.db")
	var logs safeBuffer
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, c, slog.New(slog.NewTextHandler(&logs, nil)), func(a string) { addr <- a })
	}()
	var base string
	select {
	case a := <-addr:
		base = "http://" + a
	case err := <-done:
		t.Fatalf("serve with an unreachable NATS source: %v, want it to start", err)
	}
	awaitReadyz(t, base, "", http.StatusServiceUnavailable, "source:in")
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	cancel()
	if err := <-done; err != nil {
		t.Errorf("serve = %v", err)
	}
	if !strings.Contains(string(body), "127.0.0.1:1") {
		t.Errorf("/readyz says %s, want the server named", body)
	}
	if strings.Contains(string(body)+logs.String(), "Sesame") {
		t.Errorf("/readyz (%s) or the log (%s) shows the password", body, logs.String())
	}
}

// safeBuffer is a bytes.Buffer safe for concurrent use.
type safeBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *safeBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *safeBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
