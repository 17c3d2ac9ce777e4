package transporttest

import (
	"io"
	"net"
	"sync/atomic"
	"testing"
)

// LoginCut forwards TCP connections to an AMQP broker, and hangs up the
// first few of them in the middle of the login: once the client has sent
// its protocol header and the broker its connection.start, the client's
// answer (connection.start-ok, which carries the credentials) is not
// forwarded and both sides are closed. That is a broker restarting, or a
// proxy in between hanging up, at the moment a client logs in.
type LoginCut struct {
	// Addr is the address (host:port) to give the client.
	Addr string
	cut  atomic.Int64
}

// Cut is how many connections LoginCut has hung up so far.
func (l *LoginCut) Cut() int { return int(l.cut.Load()) }

// NewLoginCut listens on loopback and forwards each connection to target
// (an AMQP broker's host:port), hanging up the first cuts of them mid-login.
// It stops when the test ends.
func NewLoginCut(t *testing.T, target string, cuts int) *LoginCut {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &LoginCut{Addr: ln.Addr().String()}
	f := &forwarder{}
	t.Cleanup(func() {
		_ = ln.Close()
		f.closeAll()
	})
	go f.serve(ln, target, func(n int, c, s net.Conn) {
		if n > cuts {
			both(c, s)
			return
		}
		go func() { _, _ = io.Copy(c, s); _ = c.Close() }()
		go func() {
			// The protocol header ("AMQP" and four version bytes) goes
			// through; the next thing the client sends is its login.
			header := make([]byte, 8)
			if _, err := io.ReadFull(c, header); err == nil {
				_, _ = s.Write(header)
				_, _ = c.Read(make([]byte, 1))
			}
			l.cut.Add(1)
			_ = c.Close()
			_ = s.Close()
		}()
	})
	return l
}
