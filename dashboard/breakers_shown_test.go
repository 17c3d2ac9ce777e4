package dashboard_test

import (
	"testing"

	"github.com/backstophq/backstop/store/sqlite"
)

// TestBreakersShownEscaped: the overview of a server with no relay of its
// own lists the circuits the store keeps, among them rows written by hand:
// one with a time SQLite keeps as text, and one whose destination holds a
// right-to-left override and control characters. Every row is shown, and
// those characters as their \uXXXX escapes: shown as they were, "hooks"
// followed by U+202E and "skooh" read as another destination, and one
// named with an ESC or a NUL-free C0 control looked like one without it.
func TestBreakersShownEscaped(t *testing.T) {
	b := browser(t)
	s := newStill(t)
	db := s.st.(*sqlite.Store).DB()
	for _, q := range []string{
		`INSERT INTO backstop_circuits (destination, open, opened_at) VALUES ('by-hand', 1, 'yesterday')`,
		"INSERT INTO backstop_circuits (destination, open) VALUES ('a\u202eb' || char(27) || '[31m' || char(1) || 'c', 1)",
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	tb := s.signedIn(t, b)
	const cells = `[...document.querySelectorAll('main table')].find((t) => t.caption.textContent === 'Destinations')`
	tb.until("the overview lists the breakers", `!!`+cells)
	got := eval[[]string](tb, `[...`+cells+`.querySelectorAll('tbody tr td:first-child')].map((td) => td.textContent)`)
	want := []string{`a\u202eb\u001b[31m\u0001c`, "by-hand"}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("the overview shows the destinations %+q, want %+q", got, want)
	}
}
