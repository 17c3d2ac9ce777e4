package natstransport_test

import (
	"context"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstophq/backstop/errorhandling"
	natstransport "github.com/backstophq/backstop/transport/nats"
)

// cutProxy forwards connections to a NATS server until cut: then it
// closes those it forwards and hangs up each new one at once, until
// restored (a server restarting, a network partition healing).
type cutProxy struct {
	addr   string
	target string
	mu     sync.Mutex
	down   bool
	conns  []net.Conn
	quiet  map[net.Conn]bool // connections silenced: what they carry is thrown away
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{addr: ln.Addr().String(), target: target, quiet: map[net.Conn]bool{}}
	t.Cleanup(func() {
		_ = ln.Close()
		p.cut()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			if p.down {
				p.mu.Unlock()
				_ = c.Close()
				continue
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				p.mu.Unlock()
				_ = c.Close()
				continue
			}
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go p.pipe(c, s, c)
			go p.pipe(c, c, s)
		}
	}()
	return p
}

// pipe copies src to dst until either fails, throwing away what it reads
// once the client connection c is silenced.
func (p *cutProxy) pipe(c, dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.mu.Lock()
		quiet := p.quiet[c]
		p.mu.Unlock()
		if n > 0 && !quiet {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			_ = dst.Close()
			return
		}
	}
}

// silence makes the connections open now go quiet both ways, as a NAT
// entry or a load balancer that dropped them without a reset: what is
// sent is read and thrown away, nothing comes back. It returns how many.
// Connections made afterwards work.
func (p *cutProxy) silence() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for i := 0; i < len(p.conns); i += 2 {
		p.quiet[p.conns[i]] = true
		n++
	}
	return n
}

// cut closes every forwarded connection and refuses new ones.
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// restore forwards new connections again.
func (p *cutProxy) restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
}

// signals is a logger that signals the channel of the first prefix a
// record's message begins with.
type signals map[string]chan struct{}

func (h signals) Enabled(context.Context, slog.Level) bool { return true }
func (h signals) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h signals) WithGroup(string) slog.Handler            { return h }
func (h signals) Handle(_ context.Context, r slog.Record) error {
	for prefix, c := range h {
		if strings.HasPrefix(r.Message, prefix) {
			select {
			case c <- struct{}{}:
			default:
			}
		}
	}
	return nil
}

// TestFailedDeliverIsNotSentOnceTheServerIsBack: a Deliver made while the
// connection is away (the server restarting, a partition) fails, and the
// relay takes the message as not sent: it releases it, and another relay
// may deliver it and the later messages of its stream. The client kept
// the publish in its reconnect buffer (8 MB by default) and wrote it once
// the connection was back, however late, after the Deliver had returned
// its error: past the stream's duplicate window, a second copy landed
// after the later messages of its stream, from a relay that no longer
// held its lease.
func TestFailedDeliverIsNotSentOnceTheServerIsBack(t *testing.T) {
	t.Parallel()
	_, js := connect(t)
	s, prefix := newStream(t, js, jetstream.StreamConfig{})
	u, err := url.Parse(natsURL())
	if err != nil {
		t.Fatal(err)
	}
	p := newCutProxy(t, u.Host)
	u.Host = p.addr
	disconnected, reconnected := make(chan struct{}, 1), make(chan struct{}, 1)
	tr, err := natstransport.New(natstransport.Config{URL: u.String(), Subject: prefix + ".{type}",
		Logger: slog.New(signals{"natstransport: disconnected": disconnected, "natstransport: reconnected": reconnected})})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	ctx := ctxFor(t)
	if err := tr.Deliver(ctx, message(t)); err != nil {
		t.Fatalf("Deliver = %v", err)
	}

	p.cut()
	select {
	case <-disconnected:
	case <-ctx.Done():
		t.Fatal("the connection was never lost")
	}
	failed := message(t)
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err = tr.Deliver(short, failed)
	cancel()
	wantFault(t, err, errorhandling.ClassTransient, errorhandling.BlameDestination, "connection_closed")

	p.restore()
	select {
	case <-reconnected:
	case <-ctx.Done():
		t.Fatal("the Transport never reconnected once the server was back")
	}
	if err := tr.Deliver(ctx, message(t)); err != nil {
		t.Fatalf("Deliver once the server is back = %v", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Fatalf("the stream holds %d messages, want 2 (those Deliver reported published): the failed Deliver's publish was sent once the connection was back", info.State.Msgs)
	}
}
