package webhook_test

import (
	"bytes"
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/transport/webhook"
)

// stallingProxy forwards TCP to target, holding back what follows the
// request's header for stall: a slow link between sender and receiver.
func stallingProxy(t *testing.T, target string, stall time.Duration) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			go func() { _, _ = io.Copy(c, b); _ = c.Close() }()
			go func() {
				defer b.Close()
				var seen []byte
				buf := make([]byte, 32<<10)
				stalled := false
				for {
					n, err := c.Read(buf)
					chunk := buf[:n]
					if !stalled {
						seen = append(seen, chunk...)
						if i := bytes.Index(seen, []byte("\r\n\r\n")); i >= 0 {
							head := len(chunk) - (len(seen) - (i + 4))
							_, _ = b.Write(chunk[:head])
							chunk = chunk[head:]
							stalled = true
							time.Sleep(stall)
						}
					}
					if stalled && len(chunk) > 0 {
						if _, werr := b.Write(chunk); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}

// A receiver guarded by RequireSignature behind a server with a
// ReadTimeout, reached over a slow link: the body does not arrive in time.
// Nothing is wrong with the message, yet RequireSignature answered 400,
// which Backstop's own transport takes for a permanent fault of the
// message: the message is dead-lettered at once, and every large message
// over that link with it. (inbox's HTTP receiver answers 408 for the same
// case since 358f8ea, for this reason.)
func TestRequireSignatureBodyCutShortIsNotTheMessagesFault(t *testing.T) {
	t.Parallel()
	secret := []byte("whsec_c2lkZWNhci1kZW1vLXNpZ25pbmcta2V5IQ==")
	srv := httptest.NewUnstartedServer(webhook.RequireSignature(secret, 0, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})))
	srv.Config.ReadTimeout = 300 * time.Millisecond
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	t.Cleanup(srv.Close)
	addr := stallingProxy(t, srv.Listener.Addr().String(), time.Second)
	tr := newTransport(t, webhook.Config{URL: "http://" + addr + "/hooks", Secret: secret, Timeout: 5 * time.Second})
	err := tr.Deliver(context.Background(), message())
	if err == nil {
		t.Fatal("delivered although the receiver could not read the body")
	}
	v := errorhandling.NewErrorClassifier().Classify(err)
	if v.Class == errorhandling.ClassPermanent || v.Blame == errorhandling.BlameMessage {
		t.Fatalf("a body the receiver's server cut short is a %s fault blamed on the %s (%v): the message would be dead-lettered",
			v.Class, v.Blame, err)
	}
}
