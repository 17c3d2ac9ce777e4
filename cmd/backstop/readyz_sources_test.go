package main

import (
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"testing"

	"github.com/backstophq/backstop/internal/testenv"
)

// TestReadyzNamesANATSSourceThatLostItsServer: /readyz covers a NATS
// source's connection: ready while connected, 503 naming source:INBOX
// and why once the server is out of reach, ready again with the source
// excluded.
func TestReadyzNamesANATSSourceThatLostItsServer(t *testing.T) {
	_, stream, _ := natsSource(t)
	u, err := url.Parse(testenv.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	p := newTCPProxy(t, u.Host)
	via := *u
	via.Host = p.addr
	hook := newHookRecorder(t)
	_, base := startServe(t, fmt.Sprintf(`listen: 127.0.0.1:0
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
`, filepath.Join(t.TempDir(), "b.db"), hook.srv.URL, via.String(), stream))
	awaitReadyz(t, base, "", http.StatusOK, "")
	p.cut()
	awaitReadyz(t, base, "", http.StatusServiceUnavailable, "source:orders")
	awaitReadyz(t, base, "?exclude=source:orders", http.StatusOK, "")
}
