package rabbitmq_test

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/transport/rabbitmq"
)

// stallProxy forwards TCP to the broker. While stalled it stops reading
// what the client sends, and goes on passing what the broker sends: what
// RabbitMQ does to a publishing connection under a memory or disk alarm.
type stallProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	gate  chan struct{} // nil, or open while stalled
	conns []net.Conn
}

func newStallProxy(t *testing.T, target string) *stallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{ln: ln}
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
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(c, s) }()
			go func() {
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					p.mu.Lock()
					gate := p.gate
					p.mu.Unlock()
					if gate != nil {
						<-gate
					}
					if n > 0 {
						if _, werr := s.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						_ = s.Close()
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		p.unstall()
		_ = ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			_ = c.Close()
		}
	})
	return p
}

func (p *stallProxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gate == nil {
		p.gate = make(chan struct{})
	}
}

func (p *stallProxy) unstall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gate != nil {
		close(p.gate)
		p.gate = nil
	}
}

func (p *stallProxy) url() string { return "amqp://guest:guest@" + p.ln.Addr().String() + "/" }

// A broker that stops reading (an alarm blocks publishers) must not wedge
// the transport: every Deliver returns, as a timeout of the destination,
// whether it was opening a channel, writing a large message or waiting for
// its confirm, and with a context that has no deadline; once the broker
// reads again the transport delivers; and Close returns during an alarm. Before, a Deliver
// opening a channel held the transport's lock for as long as the broker
// did not read, and every other Deliver and Close waited behind it; and a
// write blocked in the library ignored the Deliver's timeout.
func TestBrokerThatStopsReadingDoesNotWedgeTheTransport(t *testing.T) {
	a := connect(t)
	ex := a.exchange(unique("bt.ex"))
	a.queue(ex, "#", nil)
	p := newStallProxy(t, "127.0.0.1:5672")
	tr, err := rabbitmq.New(rabbitmq.Config{URL: p.url(), Exchange: ex, Timeout: time.Second, Channels: 4})
	if err != nil {
		t.Fatal(err)
	}
	// Warm channels, so that some calls write at once and others must
	// open a channel.
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if err := tr.Deliver(ctxFor(t), message(t)); err != nil {
				t.Errorf("Deliver before the alarm: %v", err)
			}
		})
	}
	wg.Wait()

	p.stall()
	const n = 8
	errs := make(chan error, n)
	for i := range n {
		go func() {
			m := message(t)
			if i%2 == 0 {
				m.Payload = make([]byte, 1<<20) // more than the socket buffers take
			}
			errs <- tr.Deliver(context.Background(), m)
		}()
	}
	hang := time.After(30 * time.Second) // far past Timeout: only a hang reaches it
	for i := range n {
		select {
		case err := <-errs:
			wantFault(t, err, errorhandling.ClassTransient, errorhandling.BlameDestination, "")
		case <-hang:
			t.Fatalf("%d of %d Deliver calls still running 30 s into the alarm (Timeout 1 s)", n-i, n)
		}
	}
	p.unstall()
	if err := tr.Deliver(ctxFor(t), message(t)); err != nil {
		t.Fatalf("Deliver once the broker reads again: %v", err)
	}
	p.stall()
	go func() { _ = tr.Deliver(context.Background(), message(t)) }()
	closed := make(chan error, 1)
	go func() { closed <- tr.Close() }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close still running 30 s into the alarm (Timeout 1 s)")
	}
}
