package webhook

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/backstophq/backstop/errorhandling"
)

// Sentinel errors of Deliver.
var (
	// ErrTimeout is matched by the error of a delivery that got no
	// response within Config.Timeout (a transient fault of the
	// destination). A Deliver whose own ctx ran out does not match it.
	ErrTimeout = errors.New("webhook: delivery timed out")
	// ErrRedirect is matched by the error of a delivery answered with a
	// 3xx. The transport's own client does not follow redirects: a POST
	// redirected as a GET loses its body, and a signed request sent on to
	// another host is not what was configured. A redirect means
	// Config.URL is out of date: a fault of the destination, not of the
	// message. errorhandling's table makes it transient and blames the
	// destination, so the destination's breaker opens and messages wait in
	// the outbox, with their attempts intact, until an operator fixes the
	// URL. Config.StatusOverrides or a classifier rule matching
	// ErrRedirect can treat it otherwise.
	ErrRedirect = errors.New("webhook: destination redirected")
	// ErrClosed is matched by the error of Deliver after Close.
	ErrClosed = errors.New("webhook: transport closed")
)

// MaxRetryAfter caps the Retry-After a destination can ask for.
const MaxRetryAfter = time.Hour

// maxDrain bounds how much of a response body is read and dropped so
// that the connection can be reused, and drainGrace how long that may
// take: the answer is known by then, and a body that does not come (a 2xx
// whose body never ends) held the delivery, and the relay's worker, for
// the whole Timeout. A body not drained in time costs only the connection.
const (
	maxDrain   = 64 << 10
	drainGrace = 250 * time.Millisecond
)

// excerptGrace bounds how long the start of an error answer's body is
// waited for, once its status has arrived: the verdict is known, and the
// body only explains it. A body that stalls (HTTP/1.0 without
// Content-Length, a Content-Length never fulfilled) held the delivery for
// the whole Timeout; the excerpt then quotes what came in time.
const excerptGrace = time.Second

// StatusError is a non-2xx answer of the destination. Deliver's errors
// wrap it with errorhandling's markers; errors.As finds it.
type StatusError struct {
	// URL is the destination without query or user info.
	URL string
	// StatusCode is the HTTP status code, such as 503.
	StatusCode int
	// Status is the status line, such as "503 Service Unavailable".
	Status string
	// Body is the start of the response body, at most
	// Config.MaxResponseBody bytes, made printable.
	Body string
	// Truncated says whether the body was longer than Body.
	Truncated bool
	// Location is the Location header of a 3xx.
	Location string
}

// Error returns "webhook: POST <url>: <status>: <body>".
func (e *StatusError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "webhook: POST %s: %s", e.URL, e.Status)
	if e.Location != "" {
		fmt.Fprintf(&b, " (Location: %s; redirects are not followed, update the URL)", e.Location)
	}
	if e.Body != "" {
		fmt.Fprintf(&b, ": %q", e.Body)
		if e.Truncated {
			b.WriteString(" (truncated)")
		}
	}
	return b.String()
}

// outcome reads resp and maps it to Deliver's result. stop cancels the
// request, ending a read of its body.
func (t *Transport) outcome(resp *http.Response, stop context.CancelFunc) error {
	code := resp.StatusCode
	if code < 200 {
		// A 1xx as the final answer (101 Switching Protocols): its body is
		// the raw connection, which would block a read. Closing it closes
		// the connection.
		_ = resp.Body.Close()
	} else {
		defer func() {
			timer := time.AfterFunc(drainGrace, stop)
			_, _ = io.CopyN(io.Discard, resp.Body, maxDrain)
			timer.Stop()
			_ = resp.Body.Close()
		}()
	}
	if code >= 200 && code <= 299 {
		return nil
	}
	se := &StatusError{URL: t.target, StatusCode: code, Status: clip(resp.Status, maxStatusText)}
	if se.Status == "" {
		se.Status = strconv.Itoa(code)
	}
	var err error = se
	if code >= 200 {
		timer := time.AfterFunc(excerptGrace, stop)
		se.Body, se.Truncated = excerpt(resp.Body, t.maxBody)
		timer.Stop()
	}
	if code >= 300 && code <= 399 {
		if loc, lerr := resp.Location(); lerr == nil {
			se.Location = clip(redact(loc), maxLocationText)
		}
		err = fmt.Errorf("%w: %w", ErrRedirect, se)
	}
	err = errorhandling.WithHTTPStatus(err, code)
	if rule, ok := matchStatus(t.overrides, code); ok {
		err = rule.mark(err)
	} else if code < 300 || code > 599 {
		// A 1xx as the final answer, or a status HTTP does not define:
		// the destination misbehaves. errorhandling's table covers 3xx
		// to 5xx.
		err = errorhandling.WithBlame(errorhandling.Transient(err), errorhandling.BlameDestination)
	}
	if d, ok := retryAfter(resp.Header.Get("Retry-After"), receiverNow(resp, t.clock.Now())); ok {
		err = errorhandling.RetryAfter(err, d)
	}
	return err
}

// excerpt reads at most n bytes of r and makes them printable: invalid
// UTF-8 is replaced, runs of white space are collapsed.
// Bounds of the texts of a response other than its body that go into a
// StatusError, in characters: a server's status line and Location header
// may hold megabytes, which went whole into the error, its logs and its
// fingerprint (a second of CPU for each failure of a 4 MiB status line).
const (
	maxStatusText   = 200
	maxLocationText = 1000
)

// clip makes s printable (invalid UTF-8 replaced, control and format
// characters written as U+FFFD) and cuts it to n characters, marked with
// an ellipsis.
func clip(s string, n int) string {
	if len(s) > 4*n {
		s = s[:4*n] // no rune is longer than 4 bytes
	}
	var b strings.Builder
	count := 0
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		if count == n {
			b.WriteString("…")
			break
		}
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			r = unicode.ReplacementChar
		}
		b.WriteRune(r)
		count++
	}
	return b.String()
}

func excerpt(r io.Reader, n int64) (string, bool) {
	buf, _ := io.ReadAll(io.LimitReader(r, n+1))
	truncated := int64(len(buf)) > n
	if truncated {
		buf = buf[:n]
	}
	s := strings.ToValidUTF8(string(buf), "\uFFFD")
	if truncated {
		// A cut may split the last rune.
		s = strings.TrimRight(s, "\uFFFD")
	}
	s = strings.Join(strings.FieldsFunc(s, unicode.IsSpace), " ")
	return s, truncated
}

// receiverNow is the time a response was sent on its sender's clock, its
// Date header, against which a Retry-After date is read: the date is a
// time on the receiver's clock, and read against this host's, a receiver
// ten minutes ahead paused the destination for ten minutes more than it
// asked, one ten minutes behind had its pause ignored (a date in the
// past). Without a Date that parses, it is now.
func receiverNow(resp *http.Response, now time.Time) time.Time {
	if at, err := http.ParseTime(strings.TrimSpace(resp.Header.Get("Date"))); err == nil {
		return at
	}
	return now
}

// retryAfter parses a Retry-After value, delta-seconds or an HTTP date
// relative to now, capped at MaxRetryAfter. It reports false for an
// absent, invalid or past value.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	var d time.Duration
	if secs, err := strconv.ParseUint(v, 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		// Delta-seconds too large for 64 bits is still delta-seconds.
		if err != nil || secs > uint64(MaxRetryAfter/time.Second) {
			return MaxRetryAfter, true
		}
		d = time.Duration(secs) * time.Second
	} else if at, err := http.ParseTime(v); err == nil {
		d = at.Sub(now)
	} else {
		return 0, false
	}
	if d <= 0 {
		return 0, false
	}
	return min(d, MaxRetryAfter), true
}
