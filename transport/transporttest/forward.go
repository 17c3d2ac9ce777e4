package transporttest

import (
	"crypto/tls"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// forwarder accepts connections on a listener and dials target for each,
// keeping both ends to close when the test ends.
type forwarder struct {
	mu    sync.Mutex
	conns []net.Conn
	seen  int
}

// serve accepts on ln until it is closed; for the n-th connection (from
// 1) and its broker side s, it calls pipe, which copies between them.
func (f *forwarder) serve(ln net.Listener, target string, pipe func(n int, c, s net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", target)
		if err != nil {
			_ = c.Close()
			continue
		}
		f.mu.Lock()
		f.conns = append(f.conns, c, s)
		f.seen++
		n := f.seen
		f.mu.Unlock()
		pipe(n, c, s)
	}
}

// closeAll closes every connection it forwarded.
func (f *forwarder) closeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		_ = c.Close()
	}
}

// both copies c to s and s to c, each closing its destination at the end.
func both(c, s net.Conn) {
	go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
	go func() { _, _ = io.Copy(c, s); _ = c.Close() }()
}

// UntrustedTLS starts a TLS server on loopback whose certificate no
// authority the system trusts has signed (httptest's own), for a test of
// a client that must refuse it. It returns the server's address and TLS
// configuration (to speak TLS with it on another listener, after a
// protocol's own greeting). It stops when the test ends.
func UntrustedTLS(t *testing.T) (addr string, cfg *tls.Config) {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "https://"), srv.TLS
}
