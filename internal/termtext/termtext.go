// Package termtext makes stored text safe to print on an operator's
// terminal.
package termtext

import (
	"fmt"
	"strings"
	"unicode"
)

// Escape returns s with what could mislead the operator reading it on a
// terminal written as Go escapes: control characters (C0, DEL and C1:
// "\x1b[2J" becomes `\x1b[2J`), so that a stored value cannot rewrite the
// terminal, and invisible ones (format characters such as the
// bidirectional controls and zero-width ones; line and paragraph
// separators: "\u202e" becomes `\u202e`), so that it cannot hide or
// reorder what the operator reads. Invalid UTF-8 becomes U+FFFD. Other
// text is kept as it is.
func Escape(s string) string {
	clean := true
	for _, r := range s {
		if r == unicode.ReplacementChar || needsEscape(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			fmt.Fprintf(&b, "\\x%02x", r)
		case needsEscape(r):
			fmt.Fprintf(&b, "\\u%04x", r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// needsEscape reports whether Escape writes r as an escape.
func needsEscape(r rune) bool {
	return r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp)
}
