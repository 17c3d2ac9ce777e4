package dashboard_test

import (
	"strings"
	"testing"

	"github.com/backstophq/backstop/store/sqlite"
)

// hiddenInTags writes s in Unicode tag characters (U+E0000 plus each
// ASCII character): format characters browsers draw as nothing, so that
// text holding them reads as the text without them.
func hiddenInTags(s string) (raw, escaped string) {
	var r, e strings.Builder
	for _, c := range s {
		t := 0xe0000 + c
		r.WriteRune(t)
		// as a JSON string escapes it: its UTF-16 surrogate pair
		hi, lo := 0xd800+((t-0x10000)>>10), 0xdc00+((t-0x10000)&0x3ff)
		e.WriteString(`\u` + hex4(hi) + `\u` + hex4(lo))
	}
	return r.String(), e.String()
}

func hex4(r rune) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[r>>12&0xf], digits[r>>8&0xf], digits[r>>4&0xf], digits[r&0xf]})
}

// TestTagCharactersEscaped: the dashboard escaped the invisible
// characters it listed (bidirectional controls, zero-width ones, a few
// more) but not the other format characters, which the CLI escapes
// (termtext: every Cf): an error text (a webhook endpoint's answer,
// quoted) holding "wire the funds" in Unicode tag characters
// (U+E0077...) was shown as "declined" alone, the hidden text invisible
// on the dead letters' page and the entry's. Every format character, and
// the line and paragraph separators, is now shown as its escape.
func TestTagCharactersEscaped(t *testing.T) {
	b := browser(t)
	s := newStill(t)
	raw, escaped := hiddenInTags("wire the funds")
	raw = "declined" + raw + "\ufff9x\ufffb"
	escaped = "declined" + escaped + `\ufff9x\ufffb`
	_, entryID := s.deadLetter(t, "tags", []byte(`{}`), nil)
	db := s.st.(*sqlite.Store).DB()
	if _, err := db.Exec(`UPDATE backstop_dead_letters SET error_message = ? WHERE id = ?`, raw, entryID); err != nil {
		t.Fatal(err)
	}
	tb := s.signedIn(t, b)
	tb.shownPayload("#/dead-letters/" + entryID)
	failure := eval[string](tb, `[...document.querySelectorAll('main table')].find((t) => t.caption.textContent === 'Failures').querySelector('tbody tr:last-child td:last-child').textContent`)
	if !strings.HasSuffix(failure, ": "+escaped) {
		t.Errorf("the dead letter's failures show the error as %+q, want it to end %+q", failure, ": "+escaped)
	}
	tb.page("dead-letters")
	tb.until("the groups show", `!!document.querySelector('main article.group .err')`)
	if got := eval[string](tb, `document.querySelector('main article.group .err').textContent`); got != escaped {
		t.Errorf("the dead letters' group shows its error as %+q, want %+q", got, escaped)
	}
	checkNoInvisible(t, tb, `/[\p{Cf}\u2028\u2029]/u`, "the dead letters' page")
}
