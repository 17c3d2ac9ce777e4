package outbox

import (
	"strings"
	"unicode/utf8"
)

// MaxErrorLength is the number of characters of an error message kept with
// a message; longer texts are cut.
const MaxErrorLength = 2000

// TruncateError returns s as it is stored with a message or a dead letter:
// CleanText(s, MaxErrorLength).
func TruncateError(s string) string { return CleanText(s, MaxErrorLength) }

// CleanText makes s safe to store in any text column and to log: each run
// of invalid UTF-8 bytes becomes one U+FFFD, every NUL is removed, and the
// result is cut to at most maxRunes characters (runes) on a rune boundary.
// A maxRunes of zero or less means no cut. Everything else, control
// characters included, is kept. A string that needs none of this is
// returned as is, without copying.
func CleanText(s string, maxRunes int) string {
	if strings.IndexByte(s, 0) < 0 && utf8.ValidString(s) {
		if maxRunes <= 0 || len(s) <= maxRunes {
			return s
		}
		// Valid text: cut after maxRunes runes, if there are more.
		n := 0
		for i := range s {
			if n == maxRunes {
				return s[:i]
			}
			n++
		}
		return s
	}
	var b strings.Builder
	if maxRunes > 0 {
		b.Grow(min(len(s), maxRunes*utf8.UTFMax))
	} else {
		b.Grow(len(s))
	}
	n, inInvalid := 0, false
	for i := 0; i < len(s) && (maxRunes <= 0 || n < maxRunes); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			// One replacement per run of invalid bytes, as
			// strings.ToValidUTF8 does.
			if !inInvalid {
				b.WriteRune(utf8.RuneError)
				n++
			}
			inInvalid = true
		case r == 0:
			inInvalid = false
		default:
			b.WriteString(s[i : i+size])
			n++
			inInvalid = false
		}
		i += size
	}
	return b.String()
}
