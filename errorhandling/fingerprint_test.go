package errorhandling_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	eh "github.com/backstophq/backstop/errorhandling"
)

// typedError is a root cause of a type other than *errors.errorString.
type typedError struct{ msg string }

func (e *typedError) Error() string { return e.msg }

func TestNormalizeMessage(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"dial tcp 127.0.0.1:54321: connect: connection refused", "dial tcp <addr>: connect: connection refused"},
		{"dial tcp [::1]:5432: connect: connection refused", "dial tcp <addr>: connect: connection refused"},
		{"dial tcp [2001:db8::7]:443: i/o timeout", "dial tcp <addr>: i/o timeout"},
		{"lookup db on 2001:db8::1: no such host", "lookup db on <addr>: no such host"},
		{"from fe80::1%eth0 to ::1", "from <addr> to <addr>"},
		{"std::io::Error", "std::io::Error"},
		{"host 10.1.2.3 unreachable", "host <addr> unreachable"},
		{"dial tcp db.example.com:5432: refused", "dial tcp <addr>: refused"},
		{"post http://localhost:8080/hook: EOF", "post http://<addr>/hook: EOF"},
		{"message 6ba7b810-9dad-11d1-80b4-00c04fd430c8 failed", "message <uuid> failed"},
		{"MESSAGE 6BA7B810-9DAD-11D1-80B4-00C04FD430C8", "MESSAGE <uuid>"},
		{"object at 0xc000123abc", "object at <hex>"},
		{"commit deadbeef01234567 missing", "commit <hex> missing"},
		{"word deadbeefcafe stays", "word deadbeefcafe stays"},
		{"took 1.5s, then 250ms, then 1m30s, then 3µs", "took <dur>, then <dur>, then <dur>, then <dur>"},
		{"attempt 3 of 10 (x=5, id:42, -7, 3.14)", "attempt <n> of <n> (x=<n>, id:<n>, -<n>, <n>)"},
		{"sha256 http2 utf8 v1.2.3 ipv6", "sha256 http2 utf8 v1.2.3 ipv6"},
		{`unknown field "color" in "order"`, `unknown field "<str>" in "<str>"`},
		{`quoted "with \"escape\" inside" end`, `quoted "<str>" end`},
		{"at 2024-05-01T12:00:00.123Z late", "at <time> late"},
		{"at 2024-05-01 12:00:00+02:00", "at <time>"},
		{"waited 5min", "waited <n>min"},
		{"no volatile parts: permission denied", "no volatile parts: permission denied"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := eh.NormalizeMessage(tt.in); got != tt.want {
			t.Errorf("NormalizeMessage(%q)\n got %q\nwant %q", tt.in, got, tt.want)
		}
	}
}

func TestFingerprintSame(t *testing.T) {
	t.Parallel()
	pairs := []struct {
		name string
		a, b error
	}{
		{"ports", errors.New("dial tcp 127.0.0.1:54321: connect: connection refused"),
			errors.New("dial tcp 10.0.0.7:443: connect: connection refused")},
		{"ids and numbers", fmt.Errorf("message %s failed after %d attempts", "6ba7b810-9dad-11d1-80b4-00c04fd430c8", 3),
			fmt.Errorf("message %s failed after %d attempts", "1b4e28ba-2fa1-11d2-883f-0016d3cca427", 10)},
		{"durations", fmt.Errorf("timed out after %v", 1500*time.Millisecond), fmt.Errorf("timed out after %v", 30*time.Second)},
		{"quoted values", fmt.Errorf("unknown field %q", "color"), fmt.Errorf("unknown field %q", "size")},
		{"our wrappers", &typedError{"bad input 7"}, eh.RetryAfter(eh.WithCode(eh.WithReason(eh.Permanent(eh.WithHTTPStatus(&typedError{"bad input 8"}, 400)), eh.ReasonValidationFailure), "x"), time.Second)},
		{"marker", errors.New("boom"), eh.Transient(errors.New("boom"))},
	}
	for _, p := range pairs {
		fa, fb := eh.Fingerprint(p.a), eh.Fingerprint(p.b)
		if fa != fb {
			t.Errorf("%s: Fingerprint(%q) = %s, Fingerprint(%q) = %s; want equal", p.name, p.a, fa, p.b, fb)
		}
	}
}

func TestFingerprintDifferent(t *testing.T) {
	t.Parallel()
	var v struct{ N int }
	jsonErr := json.Unmarshal([]byte(`{`), &v)
	pairs := []struct {
		name string
		a, b error
	}{
		{"words", errors.New("connection refused"), errors.New("connection reset")},
		{"types", errors.New("bad input"), &typedError{"bad input"}},
		{"root type through %w", fmt.Errorf("x: %w", errors.New("y")), fmt.Errorf("x: %w", &typedError{"y"})},
		{"context words", fmt.Errorf("send: %w", jsonErr), fmt.Errorf("load: %w", jsonErr)},
		{"join order", errors.Join(errors.New("a"), &typedError{"b"}), errors.Join(&typedError{"a"}, errors.New("b"))},
	}
	for _, p := range pairs {
		if fa, fb := eh.Fingerprint(p.a), eh.Fingerprint(p.b); fa == fb {
			t.Errorf("%s: Fingerprint(%q) = Fingerprint(%q) = %s; want different", p.name, p.a, p.b, fa)
		}
	}
}

func TestFingerprintFormat(t *testing.T) {
	t.Parallel()
	if got := eh.Fingerprint(nil); got != "" {
		t.Errorf("Fingerprint(nil) = %q, want empty", got)
	}
	// Golden value: a change here changes every stored fingerprint, which
	// splits existing groups of dead letters. Change it only on purpose.
	// It is FNV-1a 64 of "*errors.errorString\x00deliver: dial tcp <addr>:
	// connect: connection refused", computed outside Go.
	const golden = "e25844e2fa5c4f2e"
	err := fmt.Errorf("deliver: %w", errors.New("dial tcp 127.0.0.1:5432: connect: connection refused"))
	got := eh.Fingerprint(err)
	if got != golden {
		t.Errorf("Fingerprint(%q) = %s, want %s", err, got, golden)
	}
	if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(got) {
		t.Errorf("Fingerprint = %q, want 16 lower-case hex digits", got)
	}
}

// loopError unwraps to itself; Fingerprint must still return.
type loopError struct{}

func (e *loopError) Error() string { return "loop" }
func (e *loopError) Unwrap() error { return e }

func TestFingerprintUnwrapLoop(t *testing.T) {
	t.Parallel()
	if got := eh.Fingerprint(&loopError{}); len(got) != 16 {
		t.Errorf("Fingerprint(loop) = %q", got)
	}
}

// Fingerprint reads at most MaxFingerprintInput bytes of a message: two
// huge messages alike in their first part share a fingerprint, and one
// differing early does not. (A 1 MB message cost over a second of CPU.)
func TestFingerprintReadsABoundedPrefix(t *testing.T) {
	body := strings.Repeat(`"x" 12 `, (1<<20)/7)
	a := eh.Fingerprint(errors.New("upstream said: " + body + "tail one"))
	b := eh.Fingerprint(errors.New("upstream said: " + body + "tail two"))
	c := eh.Fingerprint(errors.New("downstream said: " + body))
	if a != b {
		t.Errorf("messages alike in their first %d bytes: %s and %s", eh.MaxFingerprintInput, a, b)
	}
	if a == c {
		t.Error("messages that differ in their first words share a fingerprint")
	}
}
