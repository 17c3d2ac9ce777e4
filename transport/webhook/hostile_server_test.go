package webhook_test

import (
	"bufio"
	"context"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop/transport/webhook"
)

// rawServer answers each connection with fn, for answers no well-behaved
// server gives.
func rawServer(t *testing.T, fn func(c net.Conn, br *bufio.Reader)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				fn(c, bufio.NewReader(c))
			}()
		}
	}()
	t.Cleanup(func() { _ = l.Close(); wg.Wait() })
	return "http://" + l.Addr().String() + "/hooks"
}

// A status line or Location header of megabytes, with escape sequences and
// NUL, is cut and made printable in the error, as the body is: it went
// whole into the error text, the logs and the failure's fingerprint.
func TestStatusLineAndLocationAreBounded(t *testing.T) {
	huge := strings.Repeat("A", 1<<20)
	for _, c := range []struct{ name, answer string }{
		{"status line", "HTTP/1.1 400 " + huge + "\x1b[2J\x00\xff\u202e\r\nContent-Length: 4\r\n\r\nbody"},
		{"location", "HTTP/1.1 307 Temporary Redirect\r\nLocation: http://elsewhere.example/" + huge + "\u202e\r\nContent-Length: 0\r\n\r\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			url := rawServer(t, func(conn net.Conn, br *bufio.Reader) {
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				_, _ = io.WriteString(conn, c.answer)
			})
			err := newTransport(t, webhook.Config{URL: url, Timeout: 5 * time.Second}).Deliver(context.Background(), message())
			var se *webhook.StatusError
			if !errors.As(err, &se) {
				t.Fatalf("err %.300q, want a StatusError", err)
			}
			text := err.Error()
			if len(text) > 8<<10 {
				t.Errorf("error text is %d bytes", len(text))
			}
			if strings.ContainsAny(text, "\x1b\x00\u202e") || !strings.Contains(text, "…") {
				t.Errorf("error text keeps control or format characters, or is not marked cut: %.300q", text)
			}
		})
	}
}

// holeProxy forwards TCP to target; once hole is set, the connections it
// forwards stop passing bytes but stay open (a path that silently died: a
// dropped NAT or load-balancer entry), and connections made later are
// forwarded again once hole is cleared.
type holeProxy struct {
	l      net.Listener
	target string
	hole   atomic.Bool
	mu     sync.Mutex
	held   []net.Conn
}

func (p *holeProxy) run() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.keep(c)
		if p.hole.Load() {
			continue
		}
		b, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.keep(b)
		go p.pipe(b, c)
		go p.pipe(c, b)
	}
}

func (p *holeProxy) keep(c net.Conn) {
	p.mu.Lock()
	p.held = append(p.held, c)
	p.mu.Unlock()
}

func (p *holeProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if p.hole.Load() {
			return // stop forwarding; both stay open until close
		}
		if n > 0 {
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

func (p *holeProxy) close() {
	_ = p.l.Close()
	p.mu.Lock()
	for _, c := range p.held {
		_ = c.Close()
	}
	p.mu.Unlock()
}

// After the path to an HTTP/2 destination silently died and came back,
// the transport's own client closes the dead connection (HTTP/2 health
// checks) and deliveries resume within seconds. Before, a timed-out
// HTTP/2 request only reset its stream, the dead connection stayed
// pooled, and 249 deliveries in a row failed on it after the destination
// was back.
func TestDeadHTTP2ConnectionIsDropped(t *testing.T) {
	var h2 atomic.Int64
	backend := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.ProtoMajor == 2 {
			h2.Add(1)
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	backend.EnableHTTP2 = true
	backend.Config.ErrorLog = log.New(io.Discard, "", 0)
	backend.StartTLS()
	t.Cleanup(backend.Close)
	roots := x509.NewCertPool()
	roots.AddCert(backend.Certificate())

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &holeProxy{l: l, target: backend.Listener.Addr().String()}
	go p.run()
	t.Cleanup(p.close)

	const timeout = 500 * time.Millisecond
	tr := newTransport(t, webhook.Config{URL: "https://" + l.Addr().String() + "/hooks", Timeout: timeout,
		Client: webhook.DefaultClientTrusting(timeout, roots)})
	if err := tr.Deliver(context.Background(), message()); err != nil || h2.Load() != 1 {
		t.Fatalf("first delivery: %v (HTTP/2 requests %d)", err, h2.Load())
	}
	p.hole.Store(true)
	if err := tr.Deliver(context.Background(), message()); err == nil {
		t.Fatal("a delivery through the dead path succeeded")
	}
	p.hole.Store(false) // new connections work again
	fails := 0
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); fails++ {
		if err := tr.Deliver(context.Background(), message()); err == nil {
			if fails > 10 {
				t.Errorf("recovered only after %d failed deliveries", fails)
			}
			return
		}
	}
	t.Fatalf("never recovered: %d deliveries failed over 10 s after the destination was back", fails)
}
