package webhook

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/backstophq/backstop/clock"
)

// Defaults of Config.
const (
	// DefaultTimeout bounds one delivery when Config.Timeout is zero.
	DefaultTimeout = 10 * time.Second
	// DefaultMaxResponseBody is how much of an error response's body is
	// kept in the error when Config.MaxResponseBody is zero.
	DefaultMaxResponseBody = 2 << 10
)

// ErrInvalidConfig is matched (errors.Is) by every error New returns for a
// bad Config.
var ErrInvalidConfig = errors.New("webhook: invalid config")

// Config configures a webhook Transport. Its zero value is not usable: URL
// is required.
type Config struct {
	// URL is where every message is POSTed: an absolute http or https URL.
	// Required. Its query and user info are never written into errors.
	URL string
	// Secret is the HMAC-SHA256 key that signs every request (the
	// Backstop-Signature header); receivers verify it with Verify. Empty
	// means requests are not signed: only do that when the receiver
	// authenticates Backstop another way (Headers, mutual TLS).
	Secret []byte
	// AdditionalSecrets are more keys to sign with, for rotating keys:
	// each adds one "v1=" signature to Backstop-Signature, and a receiver
	// accepts the request when any of them verifies with its key. Rotate
	// by adding the new key here, moving receivers to it, then making it
	// Secret and dropping the old one. Ignored when Secret is empty.
	AdditionalSecrets [][]byte
	// Timeout bounds one delivery, from dialling to reading the response.
	// Zero means DefaultTimeout; negative is invalid. A delivery that runs
	// out of time fails with an error matching ErrTimeout and
	// context.DeadlineExceeded: a transient fault of the destination.
	Timeout time.Duration
	// Headers are sent with every request (such as an Authorization
	// header the destination requires). They override the message's
	// headers of the same name; the Backstop-* headers override both, so
	// Headers may not name them. Nil means none.
	Headers map[string]string
	// Client sends the requests. Nil means a client of this package's own:
	// no cookie jar, a connection pool sized for concurrent deliveries to
	// one host, proxies from the environment, and redirects not followed
	// (see ErrRedirect). A client given here is used as is, and Close
	// leaves it open.
	Client *http.Client
	// MaxResponseBody is how many bytes of an error response's body are
	// kept in the error's text, to say what the destination objected to.
	// Zero means DefaultMaxResponseBody; negative is invalid.
	MaxResponseBody int64
	// Clock gives the time of the Backstop-Timestamp header and of
	// Retry-After dates. Nil means the wall clock.
	Clock clock.Clock
}

// withDefaults returns a copy of c with its zero fields set.
func (c Config) withDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxResponseBody == 0 {
		c.MaxResponseBody = DefaultMaxResponseBody
	}
	c.Clock = clock.OrReal(c.Clock)
	return c
}

// validate names the first bad field. It returns the parsed URL.
func (c Config) validate() (*url.URL, error) {
	if c.URL == "" {
		return nil, fmt.Errorf("%w: Config.URL is required", ErrInvalidConfig)
	}
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		// The URL is not echoed: it may hold a token.
		return nil, fmt.Errorf("%w: Config.URL must be an absolute http:// or https:// URL", ErrInvalidConfig)
	}
	if c.Timeout < 0 {
		return nil, fmt.Errorf("%w: Config.Timeout is negative (%v)", ErrInvalidConfig, c.Timeout)
	}
	if c.MaxResponseBody < 0 {
		return nil, fmt.Errorf("%w: Config.MaxResponseBody is negative (%d)", ErrInvalidConfig, c.MaxResponseBody)
	}
	for name, value := range c.Headers {
		if err := checkHeader(name, value); err != nil {
			return nil, fmt.Errorf("%w: Config.Headers: %v", ErrInvalidConfig, err)
		}
		if isReserved(name) {
			return nil, fmt.Errorf("%w: Config.Headers: %s is set by the transport", ErrInvalidConfig, http.CanonicalHeaderKey(name))
		}
	}
	return u, nil
}

// isReserved reports whether name is one of the headers the transport sets.
func isReserved(name string) bool {
	return strings.HasPrefix(strings.ToLower(name), "backstop-")
}

// checkHeader refuses names that are not HTTP tokens and values that
// hold control characters other than tab.
func checkHeader(name, value string) error {
	if name == "" {
		return errors.New("empty header name")
	}
	for _, r := range name {
		if r >= 0x7f || r <= ' ' || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r) {
			return fmt.Errorf("header name %q is not a valid HTTP token", name)
		}
	}
	for _, r := range value {
		if (r < ' ' && r != '\t') || r == 0x7f {
			return fmt.Errorf("header %s holds a control character", name)
		}
	}
	return nil
}

// redact returns u without user info, query or fragment, for error texts.
func redact(u *url.URL) string {
	r := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}
	return r.String()
}

// defaultClient is the client used when Config.Client is nil.
func defaultClient() *http.Client {
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   32, // the relay's workers share one host
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	return &http.Client{
		Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}
