package main

import "testing"

// Values printed in CLI tables cannot rewrite the terminal (control
// characters) nor hide or reorder text (format characters such as the
// bidirectional controls, zero-width ones, line separators).
func TestTableCellsEscapeWhatWouldMisleadTheOperator(t *testing.T) {
	for in, want := range map[string]string{
		"orders":                  "orders",
		"ünïcödé ✓":               "ünïcödé ✓",
		"a\x1b[2Jb":               `a\x1b[2Jb`,
		"tab\there":               `tab\x09here`,
		"evil\u202egnp.exe":       `evil\u202egnp.exe`,
		"\u2066isolate\u2069":     `\u2066isolate\u2069`,
		"zero\u200bwidth\ufeff":   `zero\u200bwidth\ufeff`,
		"arabic\u061cmark":        `arabic\u061cmark`,
		"line\u2028para\u2029end": `line\u2028para\u2029end`,
		"c1\u009bcsi":             `c1\x9bcsi`,
	} {
		if got := safe(in); got != want {
			t.Errorf("safe(%q) = %q, want %q", in, got, want)
		}
	}
}
