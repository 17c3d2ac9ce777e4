package dashboard_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/backstophq/backstop/outbox"
)

// TestLongNamesStayInThePage: a destination and a stream of 200 bytes
// (the default limit, taken by Enqueue) without a space, as generated
// names are, made the dead letters' page 1,594 px wide in a window of
// 1,280 (1,588 px at a phone's 390) and the streams page 2,104 px: the
// group's line naming its destinations and the stream card's title
// "destination / stream" did not wrap, and the whole page scrolled
// sideways. Long words now wrap outside tables (which scroll on their
// own).
func TestLongNamesStayInThePage(t *testing.T) {
	b := browser(t)
	s := newStill(t)
	ctx := context.Background()
	dest, stream := "orders-"+strings.Repeat("d", 193), "cust-"+strings.Repeat("s", 195)
	head := &outbox.Message{Destination: dest, Type: "order." + strings.Repeat("t", 194), Stream: stream, Payload: []byte(`{}`)}
	behind := &outbox.Message{Destination: dest, Type: "t", Stream: stream, Payload: []byte(`{}`)}
	for _, m := range []*outbox.Message{head, behind} {
		if err := s.st.Enqueue(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.st.DeadLetter(ctx, head.ID, "webhook: 400: "+strings.Repeat("x", 1900)); err != nil {
		t.Fatal(err)
	}
	es, err := s.st.DLQ().List(ctx, nil)
	if err != nil || len(es) != 1 {
		t.Fatalf("the entry: %v %v", es, err)
	}
	tb := s.signedIn(t, b)
	pages := []struct{ hash, shown string }{
		{"#/dead-letters", `document.querySelector('article.group') !== null`},
		{"#/dead-letters/" + es[0].ID, `document.querySelector('main dl.fields') !== null`},
		{"#/messages", `document.querySelector('main table') !== null`},
		{"#/messages/" + head.ID.String(), `document.querySelector('main dl.fields') !== null`},
		{"#/streams", `document.querySelector('article.stream-card') !== null`},
	}
	for _, w := range []int64{1280, 390} {
		tb.do(fmt.Sprintf("width %d", w), chromedp.EmulateViewport(w, 860))
		for _, p := range pages {
			tb.do("open "+p.hash, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`document.getElementById('content').replaceChildren(); location.hash = %q`, p.hash)))
			tb.until(p.hash+" shows", fmt.Sprintf(`location.hash === %q && %s`, p.hash, p.shown))
			if p.hash == "#/dead-letters" {
				eval[bool](tb, `(document.querySelector('article.group details').open = true)`)
			}
			if sw := eval[int](tb, `document.documentElement.scrollWidth`); sw > int(w) {
				t.Errorf("%s in a window %d px wide is %d px wide", p.hash, w, sw)
			}
		}
	}
}
