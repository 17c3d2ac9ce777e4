package webhook

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"time"
)

// DefaultClientTrusting is the client New uses when Config.Client is nil,
// trusting roots: for tests of its connection handling against a TLS
// test server.
func DefaultClientTrusting(timeout time.Duration, roots *x509.CertPool) *http.Client {
	c := defaultClient(timeout)
	c.Transport.(*http.Transport).TLSClientConfig = &tls.Config{RootCAs: roots}
	return c
}
