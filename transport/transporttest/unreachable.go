package transporttest

import (
	"io"
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
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	go func() {
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
			mu.Lock()
			conns = append(conns, c, s)
			mu.Unlock()
			go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
			go func() { _, _ = io.Copy(c, s); _ = c.Close() }()
		}
	}()
}
