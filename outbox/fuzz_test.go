package outbox_test

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/backstophq/backstop/outbox"
)

// cleanTextReference is CleanText written the slow, obvious way: replace
// invalid UTF-8, drop NUL, keep the first maxRunes runes.
func cleanTextReference(s string, maxRunes int) string {
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
	if r := []rune(s); maxRunes > 0 && len(r) > maxRunes {
		return string(r[:maxRunes])
	}
	return s
}

func FuzzCleanText(f *testing.F) {
	for _, seed := range []struct {
		s   string
		max int
	}{
		{"", 0}, {"hello", 3}, {"\x00\xff\x00\xfe", 2}, {"日本語", 2}, {"a\xe6\x97", 5},
		{"\xed\xa0\x80\u2028\u0085", 4}, {strings.Repeat("é\x00", 50), 7}, {"\uFFFD\xff", 1},
	} {
		f.Add(seed.s, seed.max)
	}
	f.Fuzz(func(t *testing.T, s string, maxRunes int) {
		maxRunes %= 1 << 16
		got := outbox.CleanText(s, maxRunes)
		if want := cleanTextReference(s, maxRunes); got != want {
			t.Fatalf("CleanText(%q, %d) = %q, want %q", s, maxRunes, got, want)
		}
		if !utf8.ValidString(got) || strings.IndexByte(got, 0) >= 0 {
			t.Fatalf("CleanText(%q, %d) = %q: invalid UTF-8 or a NUL", s, maxRunes, got)
		}
		if again := outbox.CleanText(got, maxRunes); again != got {
			t.Fatalf("CleanText is not idempotent: %q then %q", got, again)
		}
	})
}

// isToken reports whether s is a non-empty HTTP token, written apart from
// the code under test.
func isToken(s string) bool {
	const tchar = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(tchar, s[i]) < 0 {
			return false
		}
	}
	return true
}

// printable reports whether s is valid UTF-8 without C0, DEL or C1
// controls (tab allowed when tab).
func printable(s string, tab bool) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if (r < 0x20 && !(tab && r == '\t')) || (r >= 0x7f && r <= 0x9f) {
			return false
		}
	}
	return true
}

func FuzzValidate(f *testing.F) {
	f.Add("billing", "order-42", "order.created", "X-Trace", "abc", 12)
	f.Add("", "", "", "", "", 0)
	f.Add("d\x00", "s\n", "t\xff", "X A", "v\r\n", 1<<20+1)
	f.Add("d", "\u2028", "t\u0085", "Content-Type", "zoë\t日本", 0)
	f.Add("d", strings.Repeat("s", 201), "t", "X-A", "\x7f", 5)
	f.Fuzz(func(t *testing.T, dest, stream, typ, hname, hvalue string, payloadLen int) {
		if payloadLen < 0 || payloadLen > 2<<20 {
			payloadLen = 0
		}
		m := &outbox.Message{Destination: dest, Stream: stream, Type: typ,
			Payload: make([]byte, payloadLen), Headers: map[string]string{hname: hvalue}}
		err := m.Validate()
		ok := dest != "" && typ != "" && len(dest) <= 200 && len(stream) <= 200 && len(typ) <= 200 &&
			printable(dest, false) && printable(stream, false) && printable(typ, false) &&
			payloadLen <= 1<<20 && len(hname)+len(hvalue) <= 16<<10 && isToken(hname) && printable(hvalue, true)
		if ok != (err == nil) {
			t.Fatalf("Validate(%+v) = %v, want valid=%v", m, err, ok)
		}
		if err == nil {
			return
		}
		var fe *outbox.FieldError
		if !errors.Is(err, outbox.ErrInvalidMessage) || !errors.As(err, &fe) || fe.Field == "" || fe.Problem == "" {
			t.Fatalf("error %v (%T): want a *FieldError matching ErrInvalidMessage", err, err)
		}
		if text := err.Error(); !utf8.ValidString(text) || len(text) > 300 {
			t.Fatalf("error text is not short printable UTF-8: %q", text)
		}
	})
}
