package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/backstophq/backstop/admin"
	"github.com/backstophq/backstop/internal/testenv"
)

// Two `backstop serve` processes on one PostgreSQL share the work: every
// message is delivered once, in stream order, both processes deliver some,
// and SIGTERM or SIGHUP stops each gracefully (exit status 0).
func TestTwoServeProcessesShareOnePostgres(t *testing.T) {
	testenv.PostgresAdmin(t)
	if testing.Short() {
		t.Skip("builds the binary")
	}
	schema := testenv.NewSchema(t, "fleet_")
	db := withSearchPath(testenv.PostgresURL(), schema)

	dir := t.TempDir()
	bin := filepath.Join(dir, "backstop")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	// The receiver answers slowly enough that one process cannot take the
	// whole backlog before the other claims.
	var mu sync.Mutex
	seen := map[string]int{}    // webhook-id -> arrivals
	lastSeq := map[string]int{} // stream -> last n received
	var disorder []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		time.Sleep(2 * time.Millisecond)
		var stream string
		var n int
		if _, err := fmt.Sscanf(string(body), `{"stream":%q,"n":%d}`, &stream, &n); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		mu.Lock()
		seen[r.Header.Get("webhook-id")]++
		if n <= lastSeq[stream] && seen[r.Header.Get("webhook-id")] == 1 {
			disorder = append(disorder, fmt.Sprintf("%s: %d after %d", stream, n, lastSeq[stream]))
		}
		lastSeq[stream] = max(lastSeq[stream], n)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)

	cfgPath := filepath.Join(dir, "backstop.yaml")
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
db: %s
relay: {poll_interval: 20ms}
destinations:
  - name: orders
    type: webhook
    url: %s
    ordering: strict
tokens:
  - {name: ops, token: operate-token-0123456789, role: operate}
`, db, srv.URL)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	migrate := exec.Command(bin, "migrate", "--db", db)
	if out, err := migrate.CombinedOutput(); err != nil {
		t.Fatalf("backstop migrate: %v\n%s", err, out)
	}

	type proc struct {
		cmd  *exec.Cmd
		base string
		done chan error
	}
	listenRE := regexp.MustCompile(`listen=(127\.0\.0\.1:\d+)`)
	start := func() *proc {
		cmd := exec.Command(bin, "serve", "--config", cfgPath)
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout = io.Discard
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		p := &proc{cmd: cmd, done: make(chan error, 1)}
		addr := make(chan string, 1)
		go func() {
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				if m := listenRE.FindStringSubmatch(sc.Text()); m != nil {
					select {
					case addr <- m[1]:
					default:
					}
				}
			}
		}()
		go func() { p.done <- cmd.Wait() }()
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		select {
		case a := <-addr:
			p.base = "http://" + a
		case err := <-p.done:
			t.Fatalf("serve exited before listening: %v", err)
		case <-time.After(60 * time.Second):
			t.Fatal("serve did not report its address within 60 s")
		}
		return p
	}
	a, b := start(), start()

	ctx := context.Background()
	cl := &admin.Client{BaseURL: a.base, Token: "operate-token-0123456789"}
	const streams, perStream = 20, 50
	for n := 1; n <= perStream; n++ {
		for s := 0; s < streams; s++ {
			stream := "s" + strconv.Itoa(s)
			payload := fmt.Sprintf(`{"stream":%q,"n":%d}`, stream, n)
			if _, err := cl.Enqueue(ctx, admin.EnqueueRequest{Destination: "orders", Type: "t", Stream: stream, Payload: []byte(payload)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	total := streams * perStream
	waitFor(t, "every message delivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == total
	})

	delivered := func(p *proc) float64 {
		resp, err := http.Get(p.base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		var sum float64
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "backstop_delivered_total{") {
				f := strings.Fields(line)
				v, _ := strconv.ParseFloat(f[len(f)-1], 64)
				sum += v
			}
		}
		return sum
	}
	da, dbn := delivered(a), delivered(b)
	t.Logf("process A delivered %.0f, process B %.0f of %d", da, dbn, total)
	if da == 0 || dbn == 0 {
		t.Errorf("one process did all the work: A %.0f, B %.0f", da, dbn)
	}
	mu.Lock()
	for id, n := range seen {
		if n > 1 {
			t.Errorf("message %s arrived %d times", id, n)
		}
	}
	if len(disorder) > 0 {
		t.Errorf("out of stream order: %v", disorder)
	}
	mu.Unlock()

	// SIGHUP (the terminal serve ran in went away) stops it gracefully too.
	for _, stop := range []struct {
		name string
		p    *proc
		sig  syscall.Signal
	}{{"A", a, syscall.SIGTERM}, {"B", b, syscall.SIGHUP}} {
		if err := stop.p.cmd.Process.Signal(stop.sig); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-stop.p.done:
			if err != nil {
				t.Errorf("process %s after %v: %v, want exit status 0", stop.name, stop.sig, err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("process %s did not stop within 30 s of %v", stop.name, stop.sig)
		}
	}
}
