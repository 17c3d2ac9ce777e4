package dashboard_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/backstophq/backstop/store/sqlite"
)

// TestInvisibleCharactersInErrorsEscaped: an error text comes from
// outside (a webhook's refusal quotes the body the endpoint answered), and
// so may hold a right-to-left override or zero-width characters. Wherever
// the dashboard shows one (the dead letters' groups, a dead letter's
// failures and metadata, a message's last failure and the messages list),
// each is shown as its \uXXXX escape, as in payloads and names: shown as
// they were, "rejected: \u202edeliver ton" read as "rejected: not
// reviled", and a zero-width character hid what tells two errors apart.
func TestInvisibleCharactersInErrorsEscaped(t *testing.T) {
	b := browser(t)
	s := newStill(t)
	const raw = "refused \u202etxet\u202c\u200b!\u0007"
	const escaped = `refused \u202etxet\u202c\u200b!\u0007`
	msgID, entryID := s.deadLetter(t, "errors", []byte(`{}`), nil)
	// The message's own last error, as a failed attempt records it.
	db := s.st.(*sqlite.Store).DB()
	if _, err := db.Exec(`UPDATE backstop_outbox SET error = ?, failure_reason = 1 WHERE id = ?`, raw, msgID); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE backstop_dead_letters SET error_message = ?, metadata = json_object('last_error', ?) WHERE id = ?`, raw, raw, entryID); err != nil {
		t.Fatal(err)
	}
	tb := s.signedIn(t, b)
	bidi := regexpInvisible()

	tb.shownPayload("#/dead-letters/" + entryID)
	failure := eval[string](tb, `[...document.querySelectorAll('main table')].find((t) => t.caption.textContent === 'Failures').querySelector('tbody tr:last-child td:last-child').textContent`)
	if !strings.HasSuffix(failure, ": "+escaped) {
		t.Errorf("the dead letter's failures show the error as %+q, want it to end %+q", failure, ": "+escaped)
	}
	meta := eval[string](tb, `[...document.querySelectorAll('main h2')].find((h) => h.textContent === 'Metadata').nextElementSibling.textContent`)
	if !strings.Contains(meta, escaped) {
		t.Errorf("the dead letter's metadata shows %+q, want it to hold %+q", meta, escaped)
	}
	checkNoInvisible(t, tb, bidi, "the dead letter's page")

	tb.shownPayload("#/messages/" + msgID)
	last := eval[string](tb, `[...document.querySelectorAll('main dt')].find((d) => d.textContent === 'Last failure').nextElementSibling.textContent`)
	if !strings.HasSuffix(last, ": "+escaped) {
		t.Errorf("the message's page shows the last failure as %+q, want it to end %+q", last, ": "+escaped)
	}
	checkNoInvisible(t, tb, bidi, "the message's page")

	tb.page("dead-letters")
	tb.until("the groups show", `!!document.querySelector('main article.group .err')`)
	if got := eval[string](tb, `document.querySelector('main article.group .err').textContent`); got != escaped {
		t.Errorf("the dead letters' group shows its error as %+q, want %+q", got, escaped)
	}
	checkNoInvisible(t, tb, bidi, "the dead letters' page")

	tb.page("messages")
	tb.until("the messages show", `!!document.querySelector('main table tbody tr')`)
	checkNoInvisible(t, tb, bidi, "the messages' page")
}

// regexpInvisible is the class of the characters escapeInvisible escapes,
// as a JavaScript regular expression.
func regexpInvisible() string {
	return `/[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f\u2028\u2029\u2065\p{Cf}]/u`
}

// checkNoInvisible fails the test when the text of the page's main part,
// or a title or aria-label in it, holds a character of class re.
func checkNoInvisible(t *testing.T, tb *tab, re, where string) {
	t.Helper()
	got := eval[[]string](tb, fmt.Sprintf(`(() => {
		const re = %s;
		const out = [];
		const walk = document.createTreeWalker(document.querySelector('main'), NodeFilter.SHOW_TEXT);
		for (let n = walk.nextNode(); n; n = walk.nextNode()) if (re.test(n.data)) out.push(n.data);
		for (const el of document.querySelectorAll('main [title], main [aria-label]')) {
			for (const a of ['title', 'aria-label']) if (re.test(el.getAttribute(a) || '')) out.push(a + '=' + el.getAttribute(a));
		}
		return out;
	})()`, re))
	if len(got) > 0 {
		t.Errorf("%s shows invisible or bidirectional characters as they are in %+q", where, got)
	}
}
