package webhook

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/outbox"
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
	// Secret signs every request as the Standard Webhooks specification
	// says (the webhook-signature header), so that receivers verify it
	// with Verify or any Standard Webhooks library. Give it as "whsec_"
	// followed by the key in base64, the form those libraries take; any
	// other value is used as the key's raw bytes (see DecodeSecret). Empty
	// means requests are not signed: only do that when the receiver
	// authenticates Backstop another way (Headers, mutual TLS).
	Secret []byte
	// AdditionalSecrets are more keys to sign with, for rotating keys:
	// each adds one signature to webhook-signature, and a receiver accepts
	// the request when any of them verifies with its key. Rotate by adding
	// the new key here, moving receivers to it, then making it Secret and
	// dropping the old one. Requires Secret; nil means none.
	AdditionalSecrets [][]byte
	// Timeout bounds one delivery, from dialling to reading the response.
	// Zero means DefaultTimeout; negative is invalid. A delivery that runs
	// out of time fails with an error matching ErrTimeout and
	// context.DeadlineExceeded: a transient fault of the destination.
	Timeout time.Duration
	// Headers are sent with every request (such as an Authorization
	// header the destination requires). They override the message's
	// headers of the same name. They may not name the headers the
	// transport sets (webhook-id, webhook-timestamp, webhook-signature,
	// Backstop-*) nor those HTTP itself manages (Host, Content-Length,
	// Connection, Transfer-Encoding...). Nil means none.
	Headers map[string]string
	// Limits bound the messages the transport sends; zero fields mean
	// outbox's defaults (a payload of at most 1 MiB, 64 headers...). A
	// message over a limit, or with content HTTP cannot carry, fails
	// before any request is made, as a permanent fault of the message.
	// Receivers that use VerifyRequest read at most MaxVerifyBody (1 MiB):
	// raise MaxPayloadBytes only for receivers that accept more.
	Limits outbox.Limits
	// StatusOverrides change what some statuses mean for this
	// destination; the first override covering a status decides, before
	// errorhandling's built-in table. Nil means none.
	StatusOverrides []StatusOverride
	// Client sends the requests. Nil means a client of this package's own:
	// no cookie jar, a connection pool sized for concurrent deliveries to
	// one host, proxies from the environment, and redirects not followed
	// (see ErrRedirect). A client given here is used for its transport,
	// jar and timeout, except that it does not follow redirects either
	// (the transport sends with a copy whose CheckRedirect is replaced);
	// Close leaves it open.
	Client *http.Client
	// MaxResponseBody is how many bytes of an error response's body are
	// kept in the error's text, to say what the destination objected to.
	// Zero means DefaultMaxResponseBody; negative is invalid.
	MaxResponseBody int64
	// Clock gives the time of the webhook-timestamp header and of
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
	if u.Hostname() == "" {
		// "http://:8080/": a host variable that came out empty. Go would
		// send to the local machine.
		return nil, fmt.Errorf("%w: Config.URL has no host name", ErrInvalidConfig)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("%w: Config.URL has port %q, not 1 to 65535", ErrInvalidConfig, p)
		}
	}
	if c.Timeout < 0 {
		return nil, fmt.Errorf("%w: Config.Timeout is negative (%v)", ErrInvalidConfig, c.Timeout)
	}
	if c.MaxResponseBody < 0 {
		return nil, fmt.Errorf("%w: Config.MaxResponseBody is negative (%d)", ErrInvalidConfig, c.MaxResponseBody)
	}
	if err := c.Limits.Validate(); err != nil {
		return nil, fmt.Errorf("%w: Config.Limits: %w", ErrInvalidConfig, err)
	}
	seen := make(map[string]string, len(c.Headers))
	for name, value := range c.Headers {
		if err := checkConfigHeader(name, value); err != nil {
			return nil, fmt.Errorf("%w: Config.Headers: %w", ErrInvalidConfig, err)
		}
		canonical := http.CanonicalHeaderKey(name)
		if other, dup := seen[canonical]; dup {
			return nil, fmt.Errorf("%w: Config.Headers: %q and %q are one HTTP header", ErrInvalidConfig, min(name, other), max(name, other))
		}
		seen[canonical] = name
	}
	return u, nil
}

// keys decodes Secret and AdditionalSecrets, naming the first bad one.
func (c Config) keys() ([][]byte, error) {
	if len(c.Secret) == 0 {
		if len(c.AdditionalSecrets) > 0 {
			return nil, fmt.Errorf("%w: Config.AdditionalSecrets is set but Config.Secret is empty", ErrInvalidConfig)
		}
		return nil, nil
	}
	keys := make([][]byte, 0, 1+len(c.AdditionalSecrets))
	for i, s := range append([][]byte{c.Secret}, c.AdditionalSecrets...) {
		key, err := DecodeSecret(s)
		if err != nil {
			field := "Config.Secret"
			if i > 0 {
				field = fmt.Sprintf("Config.AdditionalSecrets[%d]", i-1)
			}
			return nil, fmt.Errorf("%w: %s: %w", ErrInvalidConfig, field, err)
		}
		keys = append(keys, key)
	}
	return keys, nil
}

// redact returns u without user info, query or fragment, for error texts.
func redact(u *url.URL) string {
	r := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}
	return r.String()
}

// defaultClient is the client used when Config.Client is nil, for
// deliveries bounded by timeout.
//
// Its HTTP/2 connections are health-checked: after a silence of half the
// timeout (at most 5 s) a ping is sent, and a connection whose ping goes
// unanswered as long is closed. A timed-out HTTP/2 request only resets its
// stream and the connection stays pooled: after the path to a destination
// silently died (a NAT or load balancer entry dropped, a failover), 249
// deliveries in a row failed on the dead connection once the destination
// was reachable again, and behind a server allowing more concurrent
// streams it would never have recovered. HTTP/1.1 closes a timed-out
// request's connection.
func defaultClient(timeout time.Duration) *http.Client {
	ping := min(5*time.Second, max(timeout/2, 100*time.Millisecond))
	tr := &http.Transport{
		HTTP2:                  &http.HTTP2Config{SendPingTimeout: ping, PingTimeout: ping},
		Proxy:                  http.ProxyFromEnvironment,
		DialContext:            (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           100,
		MaxIdleConnsPerHost:    32, // the relay's workers share one host
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    10 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: maxResponseHeaderBytes,
	}
	return &http.Client{Transport: tr, CheckRedirect: noRedirects}
}

// maxResponseHeaderBytes bounds the header of an answer the transport's
// own client reads: 1 MiB, as much as Go's server takes in a request,
// and room for the status line and Location of a hostile answer, which
// errors cut (TestStatusLineAndLocationAreBounded). Go's default, 10 MiB,
// let a destination answering with megabytes of tiny headers cost about
// 170 MB of allocations per delivery (each of the relay's workers at
// once); an answer over the bound fails as a transient fault of the
// destination.
const maxResponseHeaderBytes = 1<<20 + 64<<10

// noRedirects is the CheckRedirect of the clients the transport sends
// with: a 3xx is the answer (ErrRedirect), never followed.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
