package inboxtest

import (
	"io"
	"net"
	"net/url"
	"sync"
	"testing"

	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/store"
	"github.com/backstophq/backstop/store/postgres"
)

// Proxy is a TCP proxy to a test server (a broker) whose connections the
// test can cut, as a server restart or a network failure would.
type Proxy struct {
	ln       net.Listener
	upstream string
	mu       sync.Mutex
	conns    []net.Conn
	refusing bool
	// frozen, while not nil, holds every byte the proxy would forward
	// until Thaw closes it.
	frozen chan struct{}
}

// NewProxy listens on a loopback port and forwards every connection to
// upstream until the test ends.
func NewProxy(t *testing.T, upstream string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, upstream: upstream}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.pipe(c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		p.Thaw()
		p.Cut()
	})
	return p
}

// Addr is the proxy's address, to dial instead of the server's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) pipe(c net.Conn) {
	p.mu.Lock()
	refusing := p.refusing
	p.mu.Unlock()
	if refusing {
		c.Close()
		return
	}
	u, err := net.Dial("tcp", p.upstream)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.refusing {
		// Refuse (and its Cut) ran while this one was being dialled: it
		// would have outlived them, a live connection during the outage.
		p.mu.Unlock()
		c.Close()
		u.Close()
		return
	}
	p.conns = append(p.conns, c, u)
	p.mu.Unlock()
	go func() { p.copy(u, c); u.Close() }()
	go func() { p.copy(c, u); c.Close() }()
}

// copy forwards from src to dst until either fails, holding each chunk
// while the proxy is frozen.
func (p *Proxy) copy(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			frozen := p.frozen
			p.mu.Unlock()
			if frozen != nil {
				<-frozen
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Freeze holds every byte through the proxy, both ways, until Thaw: the
// connections stay open and nothing arrives, as a server that hangs or
// a network that drops packets without a reset.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen == nil {
		p.frozen = make(chan struct{})
	}
}

// Thaw ends Freeze: what was held is forwarded.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen != nil {
		close(p.frozen)
		p.frozen = nil
	}
}

// Cut closes every connection through the proxy, both ends.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// Refuse closes every connection through the proxy and, until Accept,
// every new one at once, as a server that is down.
func (p *Proxy) Refuse() {
	p.mu.Lock()
	p.refusing = true
	p.mu.Unlock()
	p.Cut()
}

// Accept ends Refuse: new connections are forwarded again.
func (p *Proxy) Accept() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refusing = false
}

// StoreThroughProxy opens e's PostgreSQL schema a second time, through a
// Proxy, for a test that cuts or refuses the store's connections while e's
// own store goes on reading the outcome directly.
func (e *Env) StoreThroughProxy() (store.Store, *Proxy) {
	e.T.Helper()
	if e.K.Name != "postgres" {
		e.T.Fatalf("StoreThroughProxy on a %s store: it proxies PostgreSQL", e.K.Name)
	}
	u, err := url.Parse(testenv.PostgresURL())
	if err != nil {
		e.T.Fatal(err)
	}
	p := NewProxy(e.T, u.Host)
	u.Host = p.Addr()
	s, err := postgres.Open(e.Ctx, u.String(), StoreConfig(e.Clk), postgres.WithSchema(e.Spec))
	if err != nil {
		e.T.Fatal(err)
	}
	e.T.Cleanup(func() { s.Close() })
	return s, p
}
