package main

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/admin"
	"github.com/backstophq/backstop/internal/testenv"
)

// TestServeStopsWhileTheDatabaseHangs: the database stops answering
// (its connections stay open, nothing comes back: a partition, a hung
// server) and serve gets SIGTERM. It is to return within
// relay.shutdown_timeout and the HTTP server's 5 s more. It took
// shutdown_timeout + 15 s (the store's pool waited for pgx to give up on
// the cancel request of each connection it destroyed), and for good while
// an admin request (curl, a dashboard tab, with no timeout of its own)
// was waiting on the database: the request's context was never
// cancelled, and the pool's Close waited for its connection.
func TestServeStopsWhileTheDatabaseHangs(t *testing.T) {
	testenv.PostgresAdmin(t)
	for _, withRequest := range []bool{false, true} {
		name := "idle"
		if withRequest {
			name = "request in flight"
		}
		t.Run(name, func(t *testing.T) { testStopWhileTheDatabaseHangs(t, withRequest) })
	}
}

func testStopWhileTheDatabaseHangs(t *testing.T, withRequest bool) {
	schema := testenv.NewSchema(t, "probe_dbh_")
	u, _ := url.Parse(testenv.PostgresURL())
	px := newTCPProxy(t, u.Host)
	u.Host = px.addr
	viaProxy := withSearchPath(u.String(), schema)

	rcv := newReceiver(t)
	cfg := strings.Replace(fleetConfig(viaProxy, rcv.srv.URL), "relay: {poll_interval: 20ms}", "relay: {poll_interval: 20ms, shutdown_timeout: 2s}", 1)
	a := startProbeServe(t, cfg)
	ctx := context.Background()
	if _, err := a.cl.Enqueue(ctx, admin.EnqueueRequest{Destination: "orders", Type: "before"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first delivery", func() bool { return len(rcv.accepted()) == 1 })

	px.freeze()
	if withRequest {
		go func() {
			req, _ := http.NewRequest("GET", a.base+"/v1/messages", nil)
			req.Header.Set("Authorization", "Bearer operate-token-0123456789")
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	if s := status(a.base, "/readyz"); s != http.StatusServiceUnavailable {
		t.Errorf("/readyz %d while the database hangs", s)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("/readyz took %v", d)
	}
	for _, p := range []string{"/healthz", "/metrics"} {
		start := time.Now()
		if s := status(a.base, p); s != 200 {
			t.Errorf("%s %d while the database hangs", p, s)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("%s took %v", p, d)
		}
	}
	start = time.Now()
	a.cancel()
	const budget = 2*time.Second + 5*time.Second + 3*time.Second // shutdown_timeout, the HTTP server's 5 s, slack
	select {
	case err := <-a.done:
		a.ended.Store(true)
		took := time.Since(start)
		t.Logf("serve returned %v after %v", err, took)
		if took > budget {
			t.Errorf("serve took %v to return after its context while the database hangs (shutdown_timeout 2s)", took)
		}
	case <-time.After(20 * time.Second):
		t.Errorf("serve did not return within 20 s of its context while the database hangs (shutdown_timeout 2s)")
	}
	px.thaw() // lets what is left of the process's connections go
}
