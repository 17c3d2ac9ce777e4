package rabbitmq_test

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/transport/rabbitmq"
)

// silentProxy forwards TCP to the broker. silence makes the connections
// open at the time go quiet both ways (a NAT entry or a load balancer
// that dropped them without a reset): what the client sends is read and
// thrown away, and nothing comes back. Connections made afterwards work.
type silentProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []*silentConn
}

type silentConn struct {
	mu     sync.Mutex
	silent bool
	c, s   net.Conn
}

func (sc *silentConn) quiet() bool {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.silent
}

func newSilentProxy(t *testing.T, target string) *silentProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &silentProxy{ln: ln}
	pipe := func(sc *silentConn, dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 && !sc.quiet() {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				if !sc.quiet() {
					_ = dst.Close()
				}
				return
			}
		}
	}
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
			sc := &silentConn{c: c, s: s}
			p.mu.Lock()
			p.conns = append(p.conns, sc)
			p.mu.Unlock()
			go pipe(sc, c, s)
			go pipe(sc, s, c)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, sc := range p.conns {
			_ = sc.c.Close()
			_ = sc.s.Close()
		}
	})
	return p
}

// silence makes the connections open now go quiet, and returns how many.
func (p *silentProxy) silence() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, sc := range p.conns {
		sc.mu.Lock()
		sc.silent = true
		sc.mu.Unlock()
	}
	return len(p.conns)
}

func (p *silentProxy) url() string { return "amqp://guest:guest@" + p.ln.Addr().String() + "/" }

// TestConnectionGoneSilentIsDialledAgain: the transport's connection goes
// quiet both ways (writes still succeed into the socket, nothing comes
// back) while the broker itself is fine and a new connection works. The
// Deliver that publishes on it times out waiting for the confirm, a
// transient fault of the destination; the next Deliver must not use that
// connection again. Before, the confirm timeout discarded only the
// channel: the next Deliver took another warm channel of the dead
// connection (or opened one on it) and timed out too, and so did every
// Deliver after it until the heartbeat noticed (3 × 10 s).
func TestConnectionGoneSilentIsDialledAgain(t *testing.T) {
	a := connect(t)
	ex := a.exchange(unique("bt.ex"))
	a.queue(ex, "#", nil)
	p := newSilentProxy(t, "127.0.0.1:5672")
	tr, err := rabbitmq.New(rabbitmq.Config{URL: p.url(), Exchange: ex, Timeout: time.Second, Channels: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	// Warm channels: four at once leave four idle channels in the pool.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if err := tr.Deliver(ctxFor(t), message(t)); err != nil {
				t.Errorf("Deliver before the silence: %v", err)
			}
		})
	}
	wg.Wait()
	if n := p.silence(); n != 1 {
		t.Fatalf("%d connections through the proxy, want 1", n)
	}

	start := time.Now()
	err = tr.Deliver(ctxFor(t), message(t))
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("Deliver on the silent connection took %v (Timeout 1 s)", took)
	}
	wantFault(t, err, errorhandling.ClassTransient, errorhandling.BlameDestination, "timeout")

	for i := range 3 {
		start := time.Now()
		if err := tr.Deliver(ctxFor(t), message(t)); err != nil {
			t.Fatalf("Deliver %d after the confirm timeout, %v later: %v (the silent connection was used again)", i+1, time.Since(start).Round(time.Millisecond), err)
		}
	}
}
