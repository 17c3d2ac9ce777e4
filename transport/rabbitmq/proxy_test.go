package rabbitmq_test

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop/transport/rabbitmq"
)

// brokerProxy forwards TCP to the broker, and plays two of a network's
// failures on the connections through it:
//   - stall stops reading what the client sends and goes on passing what
//     the broker sends, until unstall: what RabbitMQ does to a publishing
//     connection under a memory or disk alarm;
//   - silence makes the connections open at the time go quiet both ways
//     (a NAT entry or a load balancer that dropped them without a reset):
//     what is sent is read and thrown away, nothing comes back.
//     Connections made afterwards work.
type brokerProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	gate  chan struct{} // nil, or open while stalled
	conns []*proxyConn
}

type proxyConn struct {
	mu     sync.Mutex
	silent bool
	c, s   net.Conn
}

func (pc *proxyConn) quiet() bool {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return pc.silent
}

func newBrokerProxy(t *testing.T, target string) *brokerProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &brokerProxy{ln: ln}
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
			pc := &proxyConn{c: c, s: s}
			p.mu.Lock()
			p.conns = append(p.conns, pc)
			p.mu.Unlock()
			go p.pipe(pc, c, s, false)
			go p.pipe(pc, s, c, true)
		}
	}()
	t.Cleanup(func() {
		p.unstall()
		_ = ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, pc := range p.conns {
			_ = pc.c.Close()
			_ = pc.s.Close()
		}
	})
	return p
}

// pipe copies src to dst; toBroker says it is the client's side, which a
// stall holds.
func (p *brokerProxy) pipe(pc *proxyConn, dst, src net.Conn, toBroker bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if toBroker {
			p.mu.Lock()
			gate := p.gate
			p.mu.Unlock()
			if gate != nil {
				<-gate
			}
		}
		if n > 0 && !pc.quiet() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !pc.quiet() {
				_ = dst.Close()
			}
			return
		}
	}
}

func (p *brokerProxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gate == nil {
		p.gate = make(chan struct{})
	}
}

func (p *brokerProxy) unstall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gate != nil {
		close(p.gate)
		p.gate = nil
	}
}

// silence makes the connections open now go quiet, and returns how many.
func (p *brokerProxy) silence() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pc := range p.conns {
		pc.mu.Lock()
		pc.silent = true
		pc.mu.Unlock()
	}
	return len(p.conns)
}

func (p *brokerProxy) url() string { return "amqp://guest:guest@" + p.ln.Addr().String() + "/" }

// proxiedTransport is a transport to a fresh exchange bound to a queue,
// through a brokerProxy, with a Timeout of a second and four channels.
func proxiedTransport(t *testing.T) (*rabbitmq.Transport, *brokerProxy) {
	t.Helper()
	a := connect(t)
	ex := a.exchange(unique("bt.ex"))
	a.queue(ex, "#", nil)
	p := newBrokerProxy(t, "127.0.0.1:5672")
	tr, err := rabbitmq.New(rabbitmq.Config{URL: p.url(), Exchange: ex, Timeout: time.Second, Channels: 4})
	if err != nil {
		t.Fatal(err)
	}
	return tr, p
}
