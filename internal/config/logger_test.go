package config

import (
	"bufio"
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// signalBuffer is a buffer safe for the connection's goroutines whose seen
// is closed on the first write holding want.
type signalBuffer struct {
	mu   sync.Mutex
	b    bytes.Buffer
	want string
	seen chan struct{}
	once sync.Once
}

func (s *signalBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if bytes.Contains(p, []byte(s.want)) {
		s.once.Do(func() { close(s.seen) })
	}
	return s.b.Write(p)
}

func (s *signalBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// oneShotNATS accepts one client, speaks just enough of the NATS protocol
// for it to connect (INFO, then PONG to its PING), and hangs up once hangUp
// is closed. Later connections (the client reconnecting) are refused by
// closing them at once.
func oneShotNATS(t *testing.T, hangUp <-chan struct{}) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		first := true
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if !first {
				_ = c.Close()
				continue
			}
			first = false
			go func() {
				defer c.Close()
				_, _ = c.Write([]byte(`INFO {"server_id":"fake","version":"2.10.0","proto":1,"max_payload":1048576,"headers":true}` + "\r\n"))
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if strings.HasPrefix(line, "PING") {
						_, _ = c.Write([]byte("PONG\r\n"))
						break
					}
				}
				<-hangUp
			}()
		}
	}()
	return "nats://" + ln.Addr().String()
}

// TestTransportsReportToTheGivenLogger: what a NATS destination's connection
// reports outside a delivery (here, the server hanging up) goes to the
// logger RelayConfig is given, serve's handler, rather than Go's default
// logger, which is out of the operator's format and level.
func TestTransportsReportToTheGivenLogger(t *testing.T) {
	hangUp := make(chan struct{})
	url := oneShotNATS(t, hangUp)
	c, err := Parse([]byte("destinations:\n  - {name: bus, type: nats, url: '"+url+"'}\n"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	logs := &signalBuffer{want: "natstransport: disconnected", seen: make(chan struct{})}
	_, trs, err := c.RelayConfig(context.Background(), slog.New(slog.NewJSONHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer trs[0].Close()
	close(hangUp)
	select {
	case <-logs.seen:
	case <-time.After(10 * time.Second):
		t.Fatalf("the disconnection did not reach the given logger; it got:\n%s", logs)
	}
	if out := logs.String(); !strings.Contains(out, `"level":"WARN"`) {
		t.Errorf("not written by the given JSON handler:\n%s", out)
	}
}
