package transporttest

import (
	"net"
	"sync"
	"testing"
)

// Silent is a loopback server that takes every connection and never says
// a word: a host that drops packets after the handshake, a proxy with no
// server behind it.
type Silent struct {
	// Addr is the address (host:port) to give the client.
	Addr     string
	mu       sync.Mutex
	accepted int
}

// Accepted is how many connections the server has taken.
func (s *Silent) Accepted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted
}

// NewSilent starts a Silent server, calling onAccept (when not nil) after
// each connection it takes. The connections stay open, silent, until the
// test ends.
func NewSilent(t *testing.T, onAccept func()) *Silent {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Silent{Addr: ln.Addr().String()}
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.accepted++
			conns = append(conns, c)
			s.mu.Unlock()
			if onAccept != nil {
				onAccept()
			}
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return s
}
