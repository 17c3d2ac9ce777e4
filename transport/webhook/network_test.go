package webhook_test

import (
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/transport/webhook"
)

// newTransport returns a transport for cfg with the package's own client.
func newTransport(t *testing.T, cfg webhook.Config) *webhook.Transport {
	t.Helper()
	tr, err := webhook.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

// TestNoResponseIsTransientDestination: every way of getting no answer is
// the destination's fault, and the error never shows the URL's secrets.
func TestNoResponseIsTransientDestination(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := l.Addr().String()
	_ = l.Close()

	plain := httptest.NewServer(answer(204, ""))
	t.Cleanup(plain.Close)
	tlsSrv := httptest.NewUnstartedServer(answer(204, ""))
	tlsSrv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is expected
	tlsSrv.StartTLS()
	t.Cleanup(tlsSrv.Close)

	// A server that accepts and closes at once: the connection is reset or
	// ends before an answer.
	hangup, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hangup.Close() })
	go func() {
		for {
			c, err := hangup.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()

	for _, c := range []struct {
		name, url, code, says string
	}{
		{"connection refused", "http://" + closedAddr + "/hooks?token=s3cret", "connection_refused", "refused"},
		{"unresolvable host", "http://backstop-no-such-host.invalid/hooks?token=s3cret", "network", "no such host"},
		{"https to a plain server", "https://" + strings.TrimPrefix(plain.URL, "http://") + "/hooks?token=s3cret", "", "HTTP response to HTTPS client"},
		{"untrusted certificate", tlsSrv.URL + "/hooks?token=s3cret", "", "certificate"},
		{"connection closed without an answer", "http://" + hangup.Addr().String() + "/hooks?token=s3cret", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tr := newTransport(t, webhook.Config{URL: c.url, Timeout: 10 * time.Second})
			v, err := deliver(t, tr)
			if v.Class != transient || v.Blame != dest || !v.Retryable {
				t.Fatalf("verdict %s/%s retryable=%v for %v", v.Class, v.Blame, v.Retryable, err)
			}
			if c.code != "" && v.Code != c.code {
				t.Errorf("Code = %q, want %q (error %v)", v.Code, c.code, err)
			}
			if !strings.Contains(err.Error(), c.says) {
				t.Errorf("error %q does not say %q", err, c.says)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("error %q leaks the URL's token", err)
			}
		})
	}
}

// TestTrustedTLS: the same TLS server is fine once its certificate is
// trusted, so the failure above is about trust alone.
func TestTrustedTLS(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(answer(204, ""))
	t.Cleanup(srv.Close)
	tr := newTransport(t, webhook.Config{URL: srv.URL + "/hooks", Client: srv.Client()})
	if _, err := deliver(t, tr); err != nil {
		t.Fatalf("Deliver over trusted TLS = %v", err)
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable} {
		for _, c := range []struct {
			name, value string
			want        time.Duration // 0: no hint
		}{
			{"seconds", "7", 7 * time.Second},
			{"seconds with spaces", " 120 ", 2 * time.Minute},
			{"http date", epoch.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
			{"RFC 850 date", epoch.Add(time.Hour / 2).Format("Monday, 02-Jan-06 15:04:05 GMT"), 30 * time.Minute},
			{"capped", "86400", webhook.MaxRetryAfter},
			{"huge", "99999999999999999999999", webhook.MaxRetryAfter},
			{"capped date", epoch.Add(48 * time.Hour).Format(http.TimeFormat), webhook.MaxRetryAfter},
			{"past date", epoch.Add(-time.Minute).Format(http.TimeFormat), 0},
			{"zero", "0", 0},
			{"negative", "-5", 0},
			{"fraction", "1.5", 0},
			{"garbage", "soon", 0},
			{"date with junk", "Fri, 14 Mar 2025 15:10:00 GMT; please", 0},
			{"absent", "", 0},
		} {
			t.Run(http.StatusText(status)+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				var headers []string
				if c.value != "" {
					headers = []string{"Retry-After", c.value}
				}
				tr, _ := serve(t, answer(status, "slow down", headers...), webhook.Config{})
				v, err := deliver(t, tr)
				wantVerdict(t, v, transient, dest, errorhandling.ReasonTransportUnavailable)
				got, ok := errorhandling.RetryAfterOf(err)
				if ok != (c.want != 0) || got != c.want || v.RetryAfter != c.want {
					t.Fatalf("RetryAfter = %v (%v), classified %v, want %v", got, ok, v.RetryAfter, c.want)
				}
			})
		}
	}
}
