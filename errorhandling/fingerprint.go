package errorhandling

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"regexp"
	"strings"
)

// Fingerprint returns a short stable key for "the same error": 16 lower-case
// hex digits of a 64-bit FNV-1a hash over the Go type of err's root cause
// and err's message as NormalizeMessage rewrites it. Two errors that differ
// only in the parts NormalizeMessage replaces (UUIDs, times, addresses and
// ports, hex ids, durations, numbers, double-quoted strings) share a
// fingerprint; errors of different root types or with different words do
// not. What NormalizeMessage keeps tells them apart: a hex id made of
// digits alone reads as a number (<n>, not <hex>), a minus sign stays, and
// single-quoted values are kept. Only the first MaxFingerprintInput bytes
// of the message count (cut back to a space), so that a huge message (a
// response body in an error) costs no more to group than that. The
// wrappers of this package change neither the message nor the root cause,
// so Permanent(err) has the fingerprint of err. The value depends on
// nothing but its input, so it is stable across runs and processes and can
// be stored. A nil error has the fingerprint "".
//
// The root cause is found by following Unwrap; where an error unwraps to
// several (errors.Join, fmt.Errorf with several %w), the first is followed.
func Fingerprint(err error) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	if len(msg) > MaxFingerprintInput {
		msg = msg[:MaxFingerprintInput]
		if i := strings.LastIndexAny(msg, " \t\n"); i > 0 {
			msg = msg[:i] // not in the middle of a token that NormalizeMessage would replace
		}
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%T\x00%s", rootCause(err), NormalizeMessage(msg))
	return fmt.Sprintf("%016x", h.Sum64())
}

// MaxFingerprintInput is how many bytes of an error's message Fingerprint
// reads. NormalizeMessage takes about a microsecond a byte: a 1 MB message
// cost over a second of CPU on every failure of its message.
const MaxFingerprintInput = 16 << 10

// maxUnwrapDepth bounds the walk to the root cause, against an error whose
// Unwrap chain never ends.
const maxUnwrapDepth = 100

// rootCause follows Unwrap to the innermost error, taking the first branch
// of a multi-error.
func rootCause(err error) error {
	for range maxUnwrapDepth {
		var next error
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			next = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if e != nil {
					next = e
					break
				}
			}
		}
		if next == nil {
			return err
		}
		err = next
	}
	return err
}

// The patterns of NormalizeMessage, applied in this order.
var (
	quotedRe    = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	uuidRe      = regexp.MustCompile(`\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b`)
	timeRe      = regexp.MustCompile(`\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?`)
	bracketedRe = regexp.MustCompile(`\[[0-9A-Za-z:.%_-]+\](?::\d+)?`)
	ipv6Re      = regexp.MustCompile(`[0-9A-Fa-f]*:[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*(?:%[0-9A-Za-z_.-]+)?`)
	ipv4Re      = regexp.MustCompile(`\b\d{1,3}(?:\.\d{1,3}){3}(?::\d{1,5})?\b`)
	hostPortRe  = regexp.MustCompile(`\b(?:localhost|(?:[A-Za-z0-9-]+\.)+[A-Za-z]{2,}):\d{1,5}\b`)
	hex0xRe     = regexp.MustCompile(`\b0[xX][0-9a-fA-F]+\b`)
	hexRunRe    = regexp.MustCompile(`\b[0-9a-fA-F]{8,}\b`)
	durationRe  = regexp.MustCompile(`(^|[^A-Za-z0-9_.])(?:\d+(?:\.\d+)?(?:ns|us|µs|ms|h|m|s))+\b`)
	numberRe    = regexp.MustCompile(`(^|[^A-Za-z0-9_.])\d+(?:\.\d+)?`)
)

// NormalizeMessage replaces the volatile parts of an error message with
// placeholders, for grouping and display:
//
//	"…"                         double-quoted strings   "<str>"
//	UUIDs                                               <uuid>
//	2024-05-01T12:00:00Z        timestamps              <time>
//	127.0.0.1:5432, [::1]:80,
//	db.example.com:5432, fe80::1 addresses, host:port   <addr>
//	0x1f, 8+ hex digits with a digit                    <hex>
//	1.5s, 250ms, 1m30s          durations               <dur>
//	42, 3.14                    other numbers           <n>
//
// Digits that are part of a word (http2, sha256, utf8) are kept. So
// "dial tcp 127.0.0.1:54321: connect: connection refused" becomes
// "dial tcp <addr>: connect: connection refused".
func NormalizeMessage(msg string) string {
	msg = quotedRe.ReplaceAllString(msg, `"<str>"`)
	msg = uuidRe.ReplaceAllString(msg, "<uuid>")
	msg = timeRe.ReplaceAllString(msg, "<time>")
	msg = bracketedRe.ReplaceAllStringFunc(msg, func(s string) string {
		host := s[1:strings.IndexByte(s, ']')]
		if _, err := netip.ParseAddr(host); err == nil {
			return "<addr>"
		}
		return s
	})
	msg = replaceIPv6(msg)
	msg = ipv4Re.ReplaceAllString(msg, "<addr>")
	msg = hostPortRe.ReplaceAllString(msg, "<addr>")
	msg = hex0xRe.ReplaceAllString(msg, "<hex>")
	msg = hexRunRe.ReplaceAllStringFunc(msg, func(s string) string {
		if strings.ContainsAny(s, "0123456789") && strings.ContainsAny(s, "abcdefABCDEF") {
			return "<hex>"
		}
		return s
	})
	msg = durationRe.ReplaceAllString(msg, "${1}<dur>")
	msg = numberRe.ReplaceAllString(msg, "${1}<n>")
	return msg
}

// replaceIPv6 replaces bare IPv6 addresses (with an optional zone). A
// candidate must stand alone: not glued to a word on either side, so that
// "std::io" is left alone. Trailing colons and dots ("… 2001:db8::1: no
// route") belong to the sentence, not the address.
func replaceIPv6(msg string) string {
	var b strings.Builder
	last := 0
	for _, m := range ipv6Re.FindAllStringIndex(msg, -1) {
		start, end := m[0], m[1]
		cand := strings.TrimRight(msg[start:end], ":.")
		stop := start + len(cand)
		if start > 0 && isWordByte(msg[start-1]) || stop < len(msg) && isWordByte(msg[stop]) {
			continue
		}
		if a, err := netip.ParseAddr(cand); err != nil || !a.Is6() || strings.Count(cand, ":") < 2 {
			continue
		}
		b.WriteString(msg[last:start])
		b.WriteString("<addr>")
		last = stop
	}
	if last == 0 {
		return msg
	}
	b.WriteString(msg[last:])
	return b.String()
}

func isWordByte(c byte) bool {
	return c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}
