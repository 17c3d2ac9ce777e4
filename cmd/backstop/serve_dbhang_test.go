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
// server) while an admin request (curl, a dashboard tab, with no timeout
// of its own) waits on it, and serve is told to stop. It never returned:
// the request's context was never cancelled, and the store's pool Close
// waited for its connection and gave each connection it destroyed pgx's
// 15 s for a cancel request: serve returned 15 to 20 s after it was told
// to stop. It now returns once relay.shutdown_timeout (2 s here) and the
// HTTP server's 5 s more have passed.
func TestServeStopsWhileTheDatabaseHangs(t *testing.T) {
	testenv.PostgresAdmin(t)
	schema := testenv.NewSchema(t, "serve_dbh_")
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
	go func() {
		req, _ := http.NewRequest("GET", a.base+"/v1/messages", nil)
		req.Header.Set("Authorization", "Bearer operate-token-0123456789")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	// /readyz asks the database with a 2 s limit: its 503 says the
	// database hangs, and the request above has long been waiting on it.
	if s := status(a.base, "/readyz"); s != http.StatusServiceUnavailable {
		t.Fatalf("/readyz %d while the database hangs", s)
	}
	start := time.Now()
	a.cancel()
	// shutdown_timeout 2 s and the HTTP server's 5 s are timers, not
	// work: 6 s more leave a loaded machine room, and the bug's 15 s
	// more fail.
	const limit = 13 * time.Second
	select {
	case err := <-a.done:
		a.ended.Store(true)
		if took := time.Since(start); took > limit {
			t.Errorf("serve returned %v after %v, over %v, while the database hangs and a request waits on it (shutdown_timeout 2s)", err, took, limit)
		}
	case <-time.After(time.Minute):
		t.Errorf("serve did not return within a minute of its context while the database hangs and a request waits on it (shutdown_timeout 2s)")
	}
	px.thaw() // lets what is left of the process's connections go
}
