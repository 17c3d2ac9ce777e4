package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/transport/webhook"
)

// TestOperatingWalkthrough runs the sidecar walkthrough of
// docs/operating.md as it is written: each line of its sh blocks is run
// (backstop commands through the binary's root command, psql -c through
// pgx, exports as environment variables, the heredoc as the config file),
// with the database, the endpoint and the server's port replaced by the
// test's own. A line of another kind fails the test, so the page holds
// only what is tested.
func TestOperatingWalkthrough(t *testing.T) {
	t.Run("docs/operating.md", func(t *testing.T) { runWalkthrough(t, "../../docs/operating.md", "was dead-lettered") })
	t.Run("README.md", func(t *testing.T) { runWalkthrough(t, "../../README.md") })
}

func runWalkthrough(t *testing.T, file string, wants ...string) {
	doc, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := walkthroughLines(t, string(doc))

	testenv.PostgresAdmin(t)
	dbURL := withSearchPath(testenv.PostgresURL(), testenv.NewSchema(t, "walk_"))
	hook := newWalkHook(t, "whsec_c2lkZWNhci1kZW1vLXNpZ25pbmcta2V5IQ==")
	port := freePort(t)
	overrides := map[string]string{
		"DATABASE_URL":    dbURL,
		"ORDERS_URL":      hook.srv.URL + "/hooks/orders",
		"BACKSTOP_SERVER": "http://127.0.0.1:" + port,
	}
	t.Chdir(t.TempDir())
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var logs strings.Builder

	for i := 0; i < len(lines); i++ {
		line := lines[i]
		words := shellWords(t, line)
		switch {
		case words[0] == "export":
			for _, kv := range words[1:] {
				k, v, _ := strings.Cut(kv, "=")
				if o, ok := overrides[k]; ok {
					v = o
				}
				t.Setenv(k, v)
			}
		case words[0] == "cat" && len(words) == 4 && words[1] == ">" && strings.HasPrefix(words[3], "<<"):
			var body []string
			for i++; i < len(lines) && lines[i] != "EOF"; i++ {
				body = append(body, lines[i])
			}
			if err := os.WriteFile(words[2], []byte(strings.Join(body, "\n")+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		case words[0] == "backstop" && words[len(words)-1] == "&":
			args := append(words[1:len(words)-1], "--listen", "127.0.0.1:"+port)
			startBackground(t, args)
			waitFor(t, "the server to answer", func() bool {
				resp, err := http.Get("http://127.0.0.1:" + port + "/readyz")
				if err == nil {
					resp.Body.Close()
				}
				return err == nil && resp.StatusCode == 200
			})
		case words[0] == "backstop":
			if strings.Contains(line, "dlq replay") && !strings.Contains(line, "--dry-run") {
				hook.fix() // the endpoint now accepts refunds
			}
			out := mustCLI(t, words[1:]...)
			logs.WriteString("$ " + line + "\n" + out)
		case words[0] == "psql" && len(words) == 4 && words[2] == "-c":
			if _, err := conn.Exec(ctx, words[3]); err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			waitFor(t, "the outbox to settle", func() bool {
				var n int
				err := conn.QueryRow(ctx, `SELECT count(*) FROM backstop_outbox WHERE published_at IS NULL AND dead_lettered_at IS NULL`).Scan(&n)
				return err == nil && n == 0
			})
		default:
			t.Fatalf("the walkthrough has a line the test cannot run: %q", line)
		}
	}
	waitFor(t, "both orders to arrive", func() bool { return len(hook.accepted()) == 2 })
	got := hook.accepted()
	if got[0] != "order.created" || got[1] != "order.refunded" {
		t.Errorf("the endpoint accepted %v", got)
	}
	text := logs.String()
	for _, want := range append(wants, "ValidationFailure", "would replay 1 entries", "replay 1 entries", "endpoint accepts refunds since v2.3") {
		if !strings.Contains(text, want) {
			t.Errorf("the walkthrough's output lacks %q:\n%s", want, text)
		}
	}
}

// walkthroughLines returns the lines of the sh blocks of the walkthrough
// section.
func walkthroughLines(t *testing.T, doc string) []string {
	_, rest, ok := strings.Cut(doc, "# The sidecar set-up, end to end\n")
	if !ok {
		t.Fatal("no walkthrough section")
	}
	section, _, _ := strings.Cut(rest, "\n## ")
	section, _, _ = strings.Cut(section, "\n### ")
	var out []string
	in := false
	for _, l := range strings.Split(section, "\n") {
		switch {
		case l == "```sh":
			in = true
		case l == "```":
			in = false
		case in && strings.TrimSpace(l) != "":
			out = append(out, l)
		}
	}
	if len(out) < 10 {
		t.Fatalf("the walkthrough has %d lines", len(out))
	}
	return out
}

// shellWords splits a line as sh would: quotes, backslashes in double
// quotes, $NAME expanded from the environment.
func shellWords(t *testing.T, line string) []string {
	var words []string
	var cur strings.Builder
	inWord := false
	quote := byte(0)
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quote == '\'':
			if c == '\'' {
				quote = 0
			} else {
				cur.WriteByte(c)
			}
		case c == '\\' && quote == '"' && i+1 < len(line) && strings.IndexByte("\"\\$`", line[i+1]) >= 0:
			i++
			cur.WriteByte(line[i])
		case c == '"':
			if quote == '"' {
				quote = 0
			} else {
				quote, inWord = '"', true
			}
		case c == '\'' && quote == 0:
			quote, inWord = '\'', true
		case c == '$':
			j := i + 1
			for j < len(line) && (line[j] == '_' || line[j] >= 'A' && line[j] <= 'Z' || line[j] >= 'a' && line[j] <= 'z' || line[j] >= '0' && line[j] <= '9') {
				j++
			}
			cur.WriteString(os.Getenv(line[i+1 : j]))
			i, inWord = j-1, true
		case (c == ' ' || c == '\t') && quote == 0:
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if quote != 0 {
		t.Fatalf("unclosed quote in %q", line)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// startBackground runs the binary with args until the test ends.
func startBackground(t *testing.T, args []string) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		cmd := newRoot()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(args)
		done <- cmd.ExecuteContext(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("backstop %s: %v", strings.Join(args, " "), err)
		}
	})
}

func freePort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// walkHook is the application's endpoint: it verifies signatures and
// refuses refunds until fixed.
type walkHook struct {
	srv   *httptest.Server
	mu    sync.Mutex
	fixed bool
	got   []string
}

func newWalkHook(t *testing.T, secret string) *walkHook {
	h := &walkHook{}
	h.srv = httptest.NewServer(webhook.RequireSignature([]byte(secret), 5*time.Minute, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		defer h.mu.Unlock()
		typ := r.Header.Get("Backstop-Type")
		if typ == "order.refunded" && !h.fixed {
			http.Error(w, "amount must not be negative", http.StatusUnprocessableEntity)
			return
		}
		h.got = append(h.got, typ)
		w.WriteHeader(http.StatusNoContent)
	})))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *walkHook) fix() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.fixed = true
}

func (h *walkHook) accepted() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.got...)
}
