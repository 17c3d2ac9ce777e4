package natsinbox

import (
	"crypto/tls"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/backstophq/backstop/transport/transporttest"
)

// TestTLSRefusedIsPermanent: a NATS server whose certificate no trusted
// authority signed is a mistake of the configuration, as refused
// credentials are, so that serve stops at start and says so. Before,
// IsPermanent took the handshake's error for a server that could not be
// reached: serve started, said "cannot be reached", and tried for ever.
func TestTLSRefusedIsPermanent(t *testing.T) {
	t.Parallel()
	// A server that speaks the start of NATS (its INFO asks for TLS) and
	// then TLS with a certificate of httptest's own authority.
	_, untrusted := transporttest.UntrustedTLS(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				fmt.Fprintf(c, "INFO {\"server_id\":\"probe\",\"tls_required\":true,\"max_payload\":1048576}\r\n")
				_ = tls.Server(c, untrusted).Handshake()
			}()
		}
	}()
	_, err = nats.Connect("nats://"+ln.Addr().String(), nats.Timeout(5*time.Second))
	if err == nil {
		t.Fatal("Connect to a server with an untrusted certificate succeeded")
	}
	if !IsPermanent(err) {
		t.Errorf("IsPermanent(%v) = false, want true", err)
	}
}
