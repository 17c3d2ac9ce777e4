package tlsfault_test

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/internal/tlsfault"
)

// handshake dials addr over TLS with cfg and returns the first error of
// the handshake or of the first read after it (a server refusing the
// client's certificate says so only then, under TLS 1.3).
func handshake(t *testing.T, addr string, cfg *tls.Config) error {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(c, cfg)
	if err := tc.Handshake(); err != nil {
		return err
	}
	_, err = tc.Read(make([]byte, 1))
	return err
}

// TestRefused: each way a handshake fails for good, made by a real
// handshake on loopback, is refused; a handshake cut short by the
// network is not.
func TestRefused(t *testing.T) {
	quiet := log.New(io.Discard, "", 0)
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.Config.ErrorLog = quiet
	srv.StartTLS()
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "https://")
	trusted := srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs

	strict := httptest.NewUnstartedServer(http.NotFoundHandler())
	strict.TLS = &tls.Config{ClientAuth: tls.RequireAnyClientCert}
	strict.Config.ErrorLog = quiet
	strict.StartTLS()
	t.Cleanup(strict.Close)

	plain := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(plain.Close)

	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = silent.Close() })
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			// Reads the client's hello and hangs up without a word.
			go func() { _, _ = io.ReadFull(c, make([]byte, 5)); _ = c.Close() }()
		}
	}()

	refused := []struct {
		name string
		err  error
	}{
		{"unknown authority", handshake(t, addr, &tls.Config{ServerName: "127.0.0.1"})},
		{"wrong name", handshake(t, addr, &tls.Config{RootCAs: trusted, ServerName: "broker.invalid"})},
		{"client certificate refused", handshake(t, strings.TrimPrefix(strict.URL, "https://"),
			&tls.Config{InsecureSkipVerify: true})},
		{"not a TLS server", handshake(t, strings.TrimPrefix(plain.URL, "http://"), &tls.Config{ServerName: "127.0.0.1"})},
	}
	for _, c := range refused {
		if c.err == nil {
			t.Fatalf("%s: the handshake succeeded", c.name)
		}
		if !tlsfault.Refused(c.err) || !tlsfault.Refused(fmt.Errorf("dial broker: %w", c.err)) {
			t.Errorf("%s: Refused(%T %v) = false, want true", c.name, c.err, c.err)
		}
	}

	cut := handshake(t, silent.Addr().String(), &tls.Config{ServerName: "127.0.0.1"})
	if cut == nil {
		t.Fatal("a handshake the server hung up on succeeded")
	}
	for _, err := range []error{cut, os.ErrDeadlineExceeded, &net.OpError{Op: "dial", Err: errors.New("connection refused")}, nil} {
		if tlsfault.Refused(err) {
			t.Errorf("Refused(%T %v) = true, want false", err, err)
		}
	}
}
