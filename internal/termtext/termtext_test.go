package termtext

import "testing"

// Text printed for an operator (CLI tables, workflow.Run.Explain) cannot
// rewrite the terminal (control characters) nor hide or reorder text
// (format characters such as the bidirectional controls, zero-width ones,
// line separators).
func TestEscapeWhatWouldMisleadTheOperator(t *testing.T) {
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
		"bad\xffutf8":             "bad\ufffdutf8",
	} {
		if got := Escape(in); got != want {
			t.Errorf("Escape(%q) = %q, want %q", in, got, want)
		}
	}
}
