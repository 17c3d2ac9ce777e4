package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop/admin"
	"github.com/backstophq/backstop/internal/config"
)

// probeInstance is one in-process serve whose context the test controls.
type probeInstance struct {
	base   string
	cl     *admin.Client
	cancel context.CancelFunc
	done   chan error
	ended  atomic.Bool
}

// stop cancels the instance and waits for serve to return.
func (p *probeInstance) stop(t *testing.T) error {
	t.Helper()
	p.cancel()
	if p.ended.Load() {
		return nil
	}
	select {
	case err := <-p.done:
		p.ended.Store(true)
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop within 30 s of its context")
	}
	return nil
}

func startProbeServe(t *testing.T, cfgText string) *probeInstance {
	t.Helper()
	c, err := config.Parse([]byte(cfgText), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &probeInstance{cancel: cancel, done: make(chan error, 1)}
	addr := make(chan string, 1)
	go func() {
		p.done <- serve(ctx, c, slog.New(slog.DiscardHandler), func(a string) { addr <- a })
	}()
	select {
	case a := <-addr:
		p.base = "http://" + a
	case err := <-p.done:
		cancel()
		t.Fatalf("serve: %v", err)
	}
	p.cl = &admin.Client{BaseURL: p.base, Token: "operate-token-0123456789"}
	t.Cleanup(func() {
		if err := p.stop(t); err != nil {
			t.Logf("serve ended with %v", err)
		}
	})
	return p
}

// tcpProxy forwards a fixed local port to target; freeze stops every
// connection's traffic without closing it (a database that stopped
// answering), thaw lets it go again, cut closes everything.
type tcpProxy struct {
	t      *testing.T
	addr   string
	target string
	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]bool
	frozen chan struct{} // closed while traffic flows; nil channel never
	fmu    sync.Mutex
}

// freeze stops forwarding bytes, keeping every connection open: the
// database has stopped answering (a network partition, a hung server).
func (p *tcpProxy) freeze() {
	p.fmu.Lock()
	defer p.fmu.Unlock()
	p.frozen = make(chan struct{})
}

// thaw forwards again.
func (p *tcpProxy) thaw() {
	p.fmu.Lock()
	defer p.fmu.Unlock()
	if p.frozen != nil {
		close(p.frozen)
		p.frozen = nil
	}
}

func (p *tcpProxy) gate() {
	p.fmu.Lock()
	ch := p.frozen
	p.fmu.Unlock()
	if ch != nil {
		<-ch
	}
}

// copyGated copies src to dst, holding each chunk while the proxy is
// frozen.
func (p *tcpProxy) copyGated(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.gate()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{t: t, addr: ln.Addr().String(), target: target, conns: map[net.Conn]bool{}}
	p.accept(ln)
	t.Cleanup(func() { p.thaw(); p.cut() })
	return p
}

func (p *tcpProxy) accept(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.pipe(c)
		}
	}()
}

func (p *tcpProxy) pipe(c net.Conn) {
	p.gate()
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.ln == nil {
		p.mu.Unlock()
		c.Close()
		u.Close()
		return
	}
	p.conns[c], p.conns[u] = true, true
	p.mu.Unlock()
	go func() { p.copyGated(u, c); u.Close(); c.Close() }()
	p.copyGated(c, u)
	u.Close()
	c.Close()
}

func (p *tcpProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]bool{}
}

func status(base, path string) int {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(base + path)
	if err != nil {
		return -1
	}
	resp.Body.Close()
	return resp.StatusCode
}

// fleetConfig is a serve config for one webhook destination, with a
// short poll interval and the shortest instance timeout allowed.
func fleetConfig(db, hookURL string) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
db: %s
relay: {poll_interval: 20ms}
store: {instance_timeout: 11s}
destinations:
  - name: orders
    type: webhook
    url: %s
    ordering: none
    timeout: 2s
    retry: {base: 30s, max: 1h, max_attempts: 2}
    inner_retry: {attempts: 1}
tokens:
  - {name: ops, token: operate-token-0123456789, role: operate}
`, db, hookURL)
}
