package outbox_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/backstophq/backstop/outbox"
)

func TestCleanText(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		in   string
		max  int
		want string
	}{
		{"clean", "upstream answered 503", 100, "upstream answered 503"},
		{"no cap", strings.Repeat("x", 5000), 0, strings.Repeat("x", 5000)},
		{"negative is no cap", "abc", -1, "abc"},
		{"ascii cut", "abcdef", 3, "abc"},
		{"multibyte cut on a rune boundary", "日本語テキスト", 3, "日本語"},
		{"exactly max", "ééé", 3, "ééé"},
		{"NUL removed", "a\x00b\x00", 10, "ab"},
		{"NUL not counted", "\x00\x00\x00abc", 2, "ab"},
		{"invalid byte replaced", "caf\xe9 au lait", 100, "caf\uFFFD au lait"},
		{"invalid run is one replacement", "a\xff\xfe\xfdb", 100, "a\uFFFDb"},
		{"NUL splits invalid runs", "\xff\x00\xff", 100, "\uFFFD\uFFFD"},
		{"replacement counts as a rune", "\xff\xffabc", 2, "\uFFFDa"},
		{"truncated rune at the end", "ok\xe6\x97", 100, "ok\uFFFD"},
		{"surrogate half", "\xed\xa0\x80x", 100, "\uFFFDx"},
		{"real U+FFFD kept", "a\uFFFDb", 100, "a\uFFFDb"},
		{"controls other than NUL kept", "a\nb\tc\u0085\u2028", 100, "a\nb\tc\u0085\u2028"},
		{"cut among invalid bytes", "ab\xff\xff\xffcd", 3, "ab\uFFFD"},
		{"empty", "", 5, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := outbox.CleanText(c.in, c.max); got != c.want {
				t.Fatalf("CleanText(%q, %d) = %q, want %q", c.in, c.max, got, c.want)
			}
		})
	}
}

func TestCleanTextHuge(t *testing.T) {
	t.Parallel()
	in := strings.Repeat("\x00\xffé", 1<<20) // 4 MiB of hostile bytes
	got := outbox.CleanText(in, 10)
	if want := strings.Repeat("\uFFFDé", 5); got != want {
		t.Fatalf("CleanText = %q, want %q", got, want)
	}
}

func TestTruncateError(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", outbox.MaxErrorLength+10)
	got := outbox.TruncateError(long)
	if utf8.RuneCountInString(got) != outbox.MaxErrorLength || got != long[:2*outbox.MaxErrorLength] {
		t.Fatalf("TruncateError kept %d runes", utf8.RuneCountInString(got))
	}
	if got := outbox.TruncateError("pq: invalid byte \x00 in \xc3"); got != "pq: invalid byte  in \uFFFD" {
		t.Fatalf("TruncateError = %q", got)
	}
	short := "boom"
	if got := outbox.TruncateError(short); got != short {
		t.Fatalf("TruncateError(%q) = %q", short, got)
	}
}
