package transporttest

import (
	"net"
	"sync"
	"testing"
)

// Unreachable is a loopback address where nothing listens until Open: a
// broker that is down, for a test of a transport started while it is.
type Unreachable struct {
	// Addr is the address (host:port) to give the transport.
	Addr string
	mu   sync.Mutex
	ln   net.Listener
}

// NewUnreachable reserves a loopback port and closes it: connections to
// Addr are refused until Open.
func NewUnreachable(t *testing.T) *Unreachable {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &Unreachable{Addr: ln.Addr().String()}
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		u.mu.Lock()
		defer u.mu.Unlock()
		if u.ln != nil {
			_ = u.ln.Close()
		}
	})
	return u
}

// Open listens on Addr and forwards each connection to target, until the
// test ends: the broker is back.
func (u *Unreachable) Open(t *testing.T, target string) {
	t.Helper()
	ln, err := net.Listen("tcp", u.Addr)
	if err != nil {
		t.Fatal(err)
	}
	u.mu.Lock()
	u.ln = ln
	u.mu.Unlock()
	f := &forwarder{}
	t.Cleanup(f.closeAll)
	go f.serve(ln, target, func(_ int, c, s net.Conn) { both(c, s) })
}
