package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop/internal/testenv"
)

// TestReadyzNamesANATSSourceThatLostItsServer: /readyz covers a NATS
// source's connection: ready while connected, 503 naming source:INBOX
// and why once the server is out of reach, ready again with the source
// excluded.
func TestReadyzNamesANATSSourceThatLostItsServer(t *testing.T) {
	ns := serveNATSSource(t, false, "")
	p, base := ns.proxy, ns.base
	awaitReadyz(t, base, "", http.StatusOK, "")
	p.cut()
	awaitReadyz(t, base, "", http.StatusServiceUnavailable, "source:orders")
	awaitReadyz(t, base, "?exclude=source:orders", http.StatusOK, "")
}

// TestReadyzWithholdsWhyWithoutAToken: /readyz needs no token, and a
// driver's error names hosts, users and databases. With admin tokens
// configured (serve may then listen beyond loopback), a request without
// one learns which check failed but not the driver's text; one with a
// token of either role reads it. Before, anyone who reached the port
// read the broker's address in the error.
func TestReadyzWithholdsWhyWithoutAToken(t *testing.T) {
	ns := serveNATSSource(t, false, `tokens:
  - {name: viewer, token: read-token-0123456789abcdef, role: read}
`)
	p, base := ns.proxy, ns.base
	awaitReadyz(t, base, "", http.StatusOK, "")
	p.cut()
	awaitReadyz(t, base, "", http.StatusServiceUnavailable, "source:orders")

	read := func(token string) string {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, base+"/readyz", nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var got struct {
			Checks []checkResult `json:"checks"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("/readyz with token %q = %d, want 503", token, resp.StatusCode)
		}
		for _, c := range got.Checks {
			if c.Name == "source:orders" {
				return c.Error
			}
		}
		t.Fatalf("/readyz with token %q has no source:orders check: %+v", token, got.Checks)
		return ""
	}
	for _, token := range []string{"", "not-a-configured-token-000000"} {
		if why := read(token); why != withheld {
			t.Errorf("/readyz with token %q says %q, want %q", token, why, withheld)
		}
	}
	if why := read("read-token-0123456789abcdef"); why == withheld || why == "" {
		t.Errorf("/readyz with the read token says %q, want the source's error", why)
	}
}

// natsServe is serve with a NATS source, inbox orders, reading through a
// proxy the test cuts and reopens, and forwarding to a webhook.
type natsServe struct {
	proxy  *tcpProxy
	base   string // the listener's URL
	js     jetstream.JetStream
	prefix string // the stream's subjects' prefix
	hook   *hookRecorder
}

// serveNATSSource starts a natsServe, its proxy cut first when down, with
// extra appended to the config.
func serveNATSSource(t *testing.T, down bool, extra string) natsServe {
	t.Helper()
	js, stream, prefix := natsSource(t)
	u, err := url.Parse(testenv.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	ns := natsServe{proxy: newTCPProxy(t, u.Host), js: js, prefix: prefix, hook: newHookRecorder(t)}
	if down {
		ns.proxy.cut()
	}
	via := *u
	via.Host = ns.proxy.addr
	_, ns.base = startServe(t, fmt.Sprintf(`listen: 127.0.0.1:0
db: 'sqlite:%s'
relay: {poll_interval: 20ms}
destinations:
  - {name: partner-hook, type: webhook, url: '%s', inner_retry: {attempts: 1}}
sources:
  - inbox: orders
    type: nats
    url: %s
    stream: %s
    consumer: backstop
    forward: {to: [partner-hook]}
`, filepath.Join(t.TempDir(), "b.db"), ns.hook.srv.URL, via.String(), stream)+extra)
	return ns
}
