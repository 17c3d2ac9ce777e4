package webhook

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/backstophq/backstop/clock"
	"github.com/backstophq/backstop/errorhandling"
	"github.com/backstophq/backstop/outbox"
)

// fuzzNow is the clock of the fuzz targets: Retry-After dates are read
// against it.
var fuzzNow = time.Date(2025, 3, 14, 9, 26, 53, 0, time.UTC)

// FuzzRetryAfter feeds retryAfter every kind of Retry-After value: a
// returned wait is positive and at most MaxRetryAfter, delta-seconds are
// read as seconds, and an HTTP date gives its distance from now.
func FuzzRetryAfter(f *testing.F) {
	for _, s := range []string{
		"", "0", "1", "120", " 30 ", "-1", "+5", "1.5", "3600", "3601", "18446744073709551616",
		"99999999999999999999999999", "0x10", "1e3", "Fri, 14 Mar 2025 09:27:53 GMT",
		"Friday, 14-Mar-25 09:27:53 GMT", "Fri Mar 14 09:27:53 2025", "Thu, 13 Mar 2025 09:27:53 GMT",
		"Fri, 14 Mar 2125 09:27:53 GMT", "soon", "\x00", "\xff\xfe", "12\r\n", "\t7\t", "٣",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := retryAfter(v, fuzzNow)
		if !ok {
			if d != 0 {
				t.Fatalf("retryAfter(%q) = %v, false: want 0 when there is no hint", v, d)
			}
			return
		}
		if d <= 0 || d > MaxRetryAfter {
			t.Fatalf("retryAfter(%q) = %v, want within (0, %v]", v, d, MaxRetryAfter)
		}
		s := strings.TrimSpace(v)
		if secs, err := strconv.ParseUint(s, 10, 64); err == nil {
			if want := min(time.Duration(min(secs, uint64(MaxRetryAfter/time.Second)))*time.Second, MaxRetryAfter); d != want {
				t.Fatalf("retryAfter(%q) = %v, want %v (delta-seconds)", v, d, want)
			}
		} else if at, err := http.ParseTime(s); err == nil {
			if want := min(at.Sub(fuzzNow), MaxRetryAfter); d != want {
				t.Fatalf("retryAfter(%q) = %v, want %v (an HTTP date)", v, d, want)
			}
		}
	})
}

// FuzzParseStatusRange feeds Config.StatusOverrides' Status parser:
// what it accepts is an ordered range within 100-999 that holds no 2xx,
// and what it refuses makes New fail with ErrInvalidConfig.
func FuzzParseStatusRange(f *testing.F) {
	for _, s := range []string{"409", "4xx", "4XX", "500-503", "503-500", "2xx", "199-200", "100", "999", "1000",
		"0", "-", "5xx-", " 404 ", "4x", "x4x", "+404", "404-404", "1xx", "9xx", "\x00", "５００"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		lo, hi, err := parseStatusRange(s)
		_, nerr := New(Config{URL: "http://127.0.0.1:1/", StatusOverrides: []StatusOverride{
			{Status: s, Class: errorhandling.ClassTransient}}})
		if err != nil {
			if !errors.Is(nerr, ErrInvalidConfig) {
				t.Fatalf("parseStatusRange(%q) refused it (%v) but New = %v", s, err, nerr)
			}
			return
		}
		if nerr != nil {
			t.Fatalf("parseStatusRange(%q) accepted it but New = %v", s, nerr)
		}
		if lo < 100 || hi > 999 || lo > hi {
			t.Fatalf("parseStatusRange(%q) = %d-%d, want an ordered range within 100-999", s, lo, hi)
		}
		if lo <= 299 && hi >= 200 {
			t.Fatalf("parseStatusRange(%q) = %d-%d covers a 2xx", s, lo, hi)
		}
	})
}

// roundTrip is an http.RoundTripper answering with a response read from
// raw bytes, as a destination would write it on the wire.
type roundTrip []byte

func (raw roundTrip) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
	return http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), req)
}

// FuzzResponse makes Deliver read every kind of HTTP response, as bytes
// on the wire: the status line, headers (Retry-After, Location,
// Content-Length, chunked bodies) and the body. Whatever comes, Deliver
// succeeds exactly on a 2xx; otherwise its error carries the status, an
// excerpt of the body that is valid UTF-8 and at most MaxResponseBody
// bytes, a Retry-After hint within MaxRetryAfter, and a classification
// that errorhandling can act on: a response that cannot be parsed, a 1xx,
// a 3xx, a 5xx or a status above 599 blames the destination and is
// retried, never dead-lettering the message.
func FuzzResponse(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 120\r\nContent-Length: 4\r\n\r\nbusy",
		"HTTP/1.1 429 Too Many Requests\r\nRetry-After: Fri, 14 Mar 2025 09:30:00 GMT\r\n\r\n",
		"HTTP/1.1 422 Unprocessable Entity\r\nContent-Type: application/json\r\n\r\n{\"error\":\"bad \\u0000 order\"}",
		"HTTP/1.1 301 Moved Permanently\r\nLocation: https://user:pw@example.com/new?token=x\r\n\r\n",
		"HTTP/1.1 302 Found\r\nLocation: ::not a url\r\n\r\n",
		"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
		"HTTP/1.1 999 Whatever\r\n\r\n",
		"HTTP/1.1 500 \r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"HTTP/1.1 500 Internal\r\nContent-Length: 100\r\n\r\nshort",
		"HTTP/1.0 400 Bad\r\n\r\n\xff\xfe\xfd invalid utf-8 \x00\x01",
		"HTTP/1.1 404 Not Found\r\nRetry-After: -5\r\n\r\n",
		"garbage",
		"",
		"HTTP/1.1 2000 OK\r\n\r\n",
		"HTTP/1.1 099 Low\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		const maxBody = 64
		tr, err := New(Config{
			URL:             "https://usr:pw7Q@hooks.example.com/in?token=tok3nQ9",
			Secret:          []byte("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
			Client:          &http.Client{Transport: roundTrip(raw), CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
			MaxResponseBody: maxBody,
			Clock:           clock.NewFake(fuzzNow),
		})
		if err != nil {
			t.Fatal(err)
		}
		m := &outbox.Message{ID: uuid.MustParse("0195a3b2-4c5d-7e6f-8a9b-0c1d2e3f4a5b"), Destination: "d", Type: "t", Payload: []byte(`{}`)}
		derr := tr.Deliver(context.Background(), m)
		resp, perr := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
		if perr != nil {
			// Not a response: the destination misbehaved.
			if derr == nil {
				t.Fatalf("Deliver = nil for bytes that are not an HTTP response (%v)", perr)
			}
			wantRetried(t, derr)
			return
		}
		_ = resp.Body.Close()
		code := resp.StatusCode
		if code >= 200 && code <= 299 {
			if derr != nil {
				t.Fatalf("status %d: Deliver = %v, want nil", code, derr)
			}
			return
		}
		if derr == nil {
			t.Fatalf("status %d: Deliver = nil, want an error", code)
		}
		if leaks := func(s string) bool { return strings.Contains(derr.Error(), s) && !bytes.Contains(raw, []byte(s)) }; leaks("tok3nQ9") || leaks("pw7Q") {
			t.Fatalf("the error shows the URL's query or user info: %v", derr)
		}
		var se *StatusError
		if !errors.As(derr, &se) {
			// http.Client refuses some responses itself (a 1xx it
			// cannot pass on): no response, so a transient fault.
			wantRetried(t, derr)
			return
		}
		if se.StatusCode != code {
			t.Fatalf("StatusError.StatusCode = %d, want %d", se.StatusCode, code)
		}
		if len(se.Body) > maxBody*3 || !utf8.ValidString(se.Body) {
			// Each invalid byte may become U+FFFD (3 bytes).
			t.Fatalf("StatusError.Body = %q: want valid UTF-8 from at most %d bytes", se.Body, maxBody)
		}
		if d, ok := errorhandling.RetryAfterOf(derr); ok && (d <= 0 || d > MaxRetryAfter) {
			t.Fatalf("status %d: Retry-After hint %v, want within (0, %v]", code, d, MaxRetryAfter)
		}
		v := errorhandling.NewErrorClassifier().Classify(derr)
		if v.Class == errorhandling.ClassUnknown {
			t.Fatalf("status %d: the error is unclassified: %v", code, derr)
		}
		if code < 200 || (code >= 300 && code <= 399) || code >= 500 {
			wantRetried(t, derr)
		}
		if code == 422 || code == 400 {
			if v.Retryable || v.Blame != errorhandling.BlameMessage {
				t.Fatalf("status %d classified %+v, want a permanent fault of the message", code, v)
			}
		}
	})
}

// wantRetried fails unless err is a transient fault of the destination.
func wantRetried(t *testing.T, err error) {
	t.Helper()
	v := errorhandling.NewErrorClassifier().Classify(err)
	if !v.Retryable || v.Blame != errorhandling.BlameDestination {
		t.Fatalf("%v classified %+v: want a transient fault of the destination", err, v)
	}
}

// FuzzVerify feeds Verify arbitrary webhook-id, webhook-timestamp and
// webhook-signature headers, bodies and secrets. It never accepts a
// request unless one of its v1 signatures is the HMAC of exactly that id,
// timestamp and body under the secret's key, within the tolerance; and a
// request signed by Sign with a usable secret always verifies.
func FuzzVerify(f *testing.F) {
	f.Add([]byte("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), "msg_1", "1741944413", "v1,abc", []byte(`{"a":1}`), true)
	f.Add([]byte("raw key"), "msg_1", "1741944413", "v1a,xyz v1,Zm9v", []byte(""), false)
	f.Add([]byte("whsec_"), "", "", "", []byte(nil), true)
	f.Add([]byte("whsec_!!!"), "id", "x", "v1,", []byte("\x00\xff"), false)
	f.Add([]byte("k"), "id\r\nX: y", "1741944413", "v1,==== v1,a v2,b", []byte("body"), true)
	f.Add([]byte("k"), "id", "-1", "v1, v1,", []byte("b"), true)
	f.Add([]byte("k"), "id", "99999999999999999999", "v1,AAAA", []byte("b"), false)
	f.Fuzz(func(t *testing.T, secret []byte, id, ts, sigs string, body []byte, useSign bool) {
		h := http.Header{}
		key, kerr := DecodeSecret(secret)
		if useSign && kerr == nil && id != "" {
			// A request as the transport signs it, sent now.
			ts = strconv.FormatInt(fuzzNow.Unix(), 10)
			sig, err := Sign(secret, id, ts, body)
			if err != nil {
				t.Fatalf("Sign with a secret DecodeSecret accepts: %v", err)
			}
			sigs = sig + " " + sigs
			h.Set(HeaderMessageID, id)
			h.Set(HeaderTimestamp, ts)
			h.Set(HeaderSignature, sigs)
			if err := Verify(secret, h, body, fuzzNow, 0); err != nil {
				t.Fatalf("a signed request does not verify: %v", err)
			}
			return
		}
		h.Set(HeaderMessageID, id)
		h.Set(HeaderTimestamp, ts)
		h.Set(HeaderSignature, sigs)
		err := Verify(secret, h, body, fuzzNow, time.Hour)
		if kerr != nil {
			if err == nil {
				t.Fatal("Verify accepted a request under an unusable secret")
			}
			return
		}
		if err != nil {
			if !errors.Is(err, ErrInvalidSignature) {
				t.Fatalf("Verify = %v, want an error matching ErrInvalidSignature", err)
			}
			return
		}
		// Accepted: it must carry the right signature, and be recent.
		want := signature(key, h.Get(HeaderMessageID), h.Get(HeaderTimestamp), body)
		if !containsField(h.Get(HeaderSignature), want) {
			t.Fatalf("Verify accepted id %q, timestamp %q, signatures %q without the signature %q", id, ts, sigs, want)
		}
		sec, perr := strconv.ParseInt(h.Get(HeaderTimestamp), 10, 64)
		if perr != nil {
			t.Fatalf("Verify accepted the timestamp %q, which is not Unix seconds", ts)
		}
		if age := fuzzNow.Sub(time.Unix(sec, 0)); age > time.Hour || age < -time.Hour {
			t.Fatalf("Verify accepted a timestamp %v from now, tolerance 1h", age)
		}
	})
}

func containsField(s, want string) bool {
	for _, f := range strings.Fields(s) {
		if f == want {
			return true
		}
	}
	return false
}
