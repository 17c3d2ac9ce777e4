package dashboard_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/backstophq/backstop/admin"
	"github.com/backstophq/backstop/dashboard"
	"github.com/backstophq/backstop/dlq"
	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/store"
)

// still is the admin API and the dashboard over a SQLite store that no
// relay drives: every message stays where the test put it.
type still struct {
	st  store.Store
	url string
}

func newStill(t *testing.T) *still {
	t.Helper()
	s := &still{st: openSQLite(t)}
	api, err := admin.New(admin.Config{
		Store:  s.st,
		Tokens: []admin.Token{{Name: "wallboard", Secret: readToken, Role: admin.RoleRead}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", api.Handler())
	mux.Handle("/", dashboard.Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

// deadLetter writes a message with payload and headers on a stream of its
// own, dead-letters it, and returns its id and its entry's.
func (s *still) deadLetter(t *testing.T, stream string, payload []byte, headers map[string]string) (msgID, entryID string) {
	t.Helper()
	ctx := context.Background()
	m := &outbox.Message{Destination: "orders", Type: "t", Stream: stream, Payload: payload, Headers: headers}
	if err := s.st.Enqueue(ctx, m); err != nil {
		t.Fatal(err)
	}
	if err := s.st.DeadLetter(ctx, m.ID, "test"); err != nil {
		t.Fatal(err)
	}
	es, err := s.st.DLQ().List(ctx, &dlq.Filters{Destination: "orders", Stream: stream})
	if err != nil || len(es) != 1 {
		t.Fatalf("the entry of stream %s: %v %v", stream, es, err)
	}
	return m.ID.String(), es[0].ID
}

// roleProbe is the console error of a read token's sign-in: the dry run
// by which the dashboard learns the role is refused with 403.
const roleProbe = "status of 403"

// signedIn is a tab signed in with the read token.
func (s *still) signedIn(t *testing.T, b context.Context) *tab {
	tb := newTab(t, b, s.url, false)
	tb.open()
	tb.signIn(readToken, "read only")
	return tb
}

// shownPayload opens the page at hash and returns what it shows under
// its Payload heading.
func (tb *tab) shownPayload(hash string) string {
	tb.t.Helper()
	// The page shown is cleared first: the hash changes at once, the page
	// on the next hashchange event.
	tb.do("open "+hash, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`document.getElementById('content').replaceChildren(); location.hash = %q`, hash)))
	const section = `[...document.querySelectorAll('main h2')].find((h) => h.textContent === 'Payload')?.nextElementSibling`
	tb.until(hash+" shows its payload", fmt.Sprintf(`location.hash === %q && !!%s`, hash, section))
	return eval[string](tb, section+`.textContent`)
}

// TestPayloadShownAsStored: the dead letter's page and the message's page
// show a JSON payload token for token as the message holds it, indented:
// a 64-bit integer, a number beyond a double's range, a trailing zero and
// a repeated key as they are, markup as text; the payload null as null.
// (The API writes <, > and & in strings as \u003c, \u003e and \u0026; the
// page writes them back as the characters, so a \u003c the message held
// shows as <, the same string.)
func TestPayloadShownAsStored(t *testing.T) {
	b := browser(t)
	s := newStill(t)
	for _, c := range []struct {
		name, payload, want string
	}{{
		name:    "numbers and repeated keys",
		payload: `{"order_id":12345678901234567890, "amount":10.50,"ratio":1e400,"tiny":-1E-400,"account":1,"account":2,"note":"<b>&amp;</b>\u003c\\u003c \"q\"","tags":[],"meta":{},"items":[{"sku":"a","qty":-0}]}`,
		want: `{
  "order_id": 12345678901234567890,
  "amount": 10.50,
  "ratio": 1e400,
  "tiny": -1E-400,
  "account": 1,
  "account": 2,
  "note": "<b>&amp;</b><\\u003c \"q\"",
  "tags": [],
  "meta": {},
  "items": [
    {
      "sku": "a",
      "qty": -0
    }
  ]
}`,
	}, {
		name:    "null",
		payload: `null`,
		want:    `null`,
	}, {
		name:    "a number alone",
		payload: ` 98765432109876543210 `,
		want:    `98765432109876543210`,
	}, {
		name:    "no payload",
		payload: ``,
		want:    `No payload.`,
	}} {
		t.Run(c.name, func(t *testing.T) {
			msgID, entryID := s.deadLetter(t, strings.ReplaceAll(c.name, " ", "-"), []byte(c.payload), nil)
			tb := s.signedIn(t, b)
			for _, hash := range []string{"#/dead-letters/" + entryID, "#/messages/" + msgID} {
				if got := tb.shownPayload(hash); got != c.want {
					t.Errorf("%s shows the payload %#q as\n%s\nwant\n%s", hash, c.payload, got, c.want)
				}
			}
			if errs := tb.consoleErrors(roleProbe); len(errs) > 0 {
				t.Errorf("console errors: %q", errs)
			}
		})
	}
}

// TestInvisibleCharactersEscaped: every Bidi_Control character, and the
// invisible ones, in a payload's string or a header's value is shown as
// its \uXXXX escape, so that none can hide or reorder what the operator
// reads.
func TestInvisibleCharactersEscaped(t *testing.T) {
	b := browser(t)
	s := newStill(t)
	bidi := []rune{0x061c, 0x200e, 0x200f, 0x202a, 0x202b, 0x202c, 0x202d, 0x202e, 0x2066, 0x2067, 0x2068, 0x2069}
	invisible := []rune{0x00ad, 0x180e, 0x200b, 0x200c, 0x200d, 0x2060, 0xfeff}
	var raw, escaped strings.Builder
	for _, r := range append(bidi, invisible...) {
		fmt.Fprintf(&raw, "%c.", r)
		fmt.Fprintf(&escaped, `\u%04x.`, r)
	}
	msgID, entryID := s.deadLetter(t, "invisible", []byte(`{"s":"`+raw.String()+`"}`),
		map[string]string{"X-Note": "x" + raw.String()})
	tb := s.signedIn(t, b)
	want := "{\n  \"s\": \"" + escaped.String() + "\"\n}"
	for _, hash := range []string{"#/dead-letters/" + entryID, "#/messages/" + msgID} {
		if got := tb.shownPayload(hash); got != want {
			t.Errorf("%s shows the payload as %+q, want %+q", hash, got, want)
		}
		header := eval[string](tb, `[...document.querySelectorAll('main td code')].find((c) => c.textContent === 'X-Note').closest('tr').cells[1].textContent`)
		if want := "x" + escaped.String(); header != want {
			t.Errorf("%s shows the header as %+q, want %+q", hash, header, want)
		}
	}

	// A stream's name may hold them too (enqueue refuses control
	// characters only): the message's and the dead letter's pages show it
	// escaped.
	msgID, entryID = s.deadLetter(t, "named"+raw.String(), []byte(`{}`), nil)
	const shownStream = `[...document.querySelectorAll('main dt')].find((d) => d.textContent === 'Stream')?.nextElementSibling.textContent`
	for _, hash := range []string{"#/dead-letters/" + entryID, "#/messages/" + msgID} {
		tb.shownPayload(hash) // waits for the page
		if got, want := eval[string](tb, shownStream), "named"+escaped.String(); got != want {
			t.Errorf("%s shows the stream as %+q, want %+q", hash, got, want)
		}
	}
}

// TestPollIntervalBounded: ?poll= sets how often a page refreshes within
// 250 ms and an hour; a value that is not a finite number leaves the
// default. setInterval takes a delay that is not finite or beyond 2^31-1
// ms as 0: the page would poll the API back to back.
func TestPollIntervalBounded(t *testing.T) {
	b := browser(t)
	s := newStill(t)
	for _, c := range []struct {
		poll string
		want int
	}{
		{"Infinity", 2000}, {"-Infinity", 2000}, {"1e309", 2000}, {"NaN", 2000}, {"", 2000},
		{"3000000000", 3600000}, {"4294967296", 3600000}, {"7200000", 3600000},
		{"-5", 250}, {"100", 250}, {"500", 500},
	} {
		t.Run(c.poll, func(t *testing.T) {
			tb := newTab(t, b, s.url, false)
			tb.do("open the dashboard",
				chromedp.Navigate(s.url+"/?poll="+c.poll),
				chromedp.WaitVisible(chromedp.CSS(`input[name=token]`)))
			// The page sets its interval once signed in: record the delays
			// it asks for.
			eval[bool](tb, `(() => {
				window.delays = [];
				const setInterval0 = window.setInterval;
				window.setInterval = (f, ms, ...args) => { window.delays.push(ms); return setInterval0(f, ms, ...args); };
				return true;
			})()`)
			tb.signIn(readToken, "read only")
			tb.until("the overview polls", `window.delays.length > 0`)
			if got := eval[[]string](tb, `window.delays.map(String)`); got[0] != fmt.Sprint(c.want) {
				t.Errorf("?poll=%s polls every %v ms, want %d", c.poll, got, c.want)
			}
		})
	}
}

// TestBadAddressSaysSo: a fragment holding a malformed percent-escape
// shows a page that says so, opened by a link or loaded as the address.
func TestBadAddressSaysSo(t *testing.T) {
	b := browser(t)
	s := newStill(t)
	tb := s.signedIn(t, b)
	const says = `document.querySelector('main h1')?.textContent === 'Not found' && (document.querySelector('main [role=alert]')?.textContent || '').startsWith('Bad address: ')`
	tb.do("follow a bad link", chromedp.Evaluate[chromedp.Void](`location.hash = '#/messages/%E0'`))
	tb.until("the page says the address is bad", says)
	// Another query than the page's: a load, not a hashchange.
	tb.do("load a bad address", chromedp.Navigate(s.url+"/?load=1#/dead-letters/a%E0%A4b"))
	tb.until("the page says the address is bad", says)
	if shown := eval[string](tb, `document.querySelector('main [role=alert] code').textContent`); shown != "#/dead-letters/a%E0%A4b" {
		t.Errorf("the page names the address %q", shown)
	}
	tb.do("follow a good link", chromedp.Click(chromedp.CSS(`main a[href="#/"]`)))
	tb.until("the overview shows", `document.getElementById('content').dataset.page === 'overview'`)
	if errs := tb.consoleErrors(roleProbe); len(errs) > 0 {
		t.Errorf("console errors: %q", errs)
	}
}
