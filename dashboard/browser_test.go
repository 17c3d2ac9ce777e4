package dashboard_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/backstophq/backstop/store"
)

// TestDashboard drives the dashboard in headless Chromium on each store:
// a read token sees every page and is offered no action; an operate token
// releases a blocked stream, replays an entry, bulk-replays a group after
// its dry run and resolves an entry with notes, each by clicking, and the
// messages reach the destination. No page writes an error to the console.
func TestDashboard(t *testing.T) {
	b := browser(t)
	shots := os.Getenv(ScreenshotsEnv) == "1"
	for _, s := range []struct {
		name string
		open func(*testing.T) store.Store
	}{{"sqlite", openSQLite}, {"postgres", openPostgres}} {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, s.open(t))
			t.Run("read token cannot act", func(t *testing.T) { readOnly(t, b, f) })
			t.Run("operate token acts", func(t *testing.T) { operate(t, b, f, shots && s.name == "sqlite") })
		})
	}
}

// readOnly checks that a read token sees every page and is offered no
// action, and that the API refuses it one.
func readOnly(t *testing.T, b context.Context, f *fixture) {
	tb := newTab(t, b, f.url, false)
	tb.open()
	tb.do("sign in with an unknown token",
		chromedp.SendKeys(chromedp.CSS(`input[name=token]`), readToken+"x"),
		chromedp.Click(chromedp.CSS(`form.login button[type=submit]`)))
	tb.until("the token is refused", `(document.querySelector('form.login [role=alert]')?.textContent || '').includes('does not know')`)
	tb.signIn(readToken, "read only")
	tb.until("the overview counts the dead letters", `document.querySelector('[data-tile="Dead letters"]')?.textContent === '6'`)
	if n := f.leasedReads.Load(); n != 0 {
		t.Errorf("the overview listed the leased messages %d times; the breakers report in_flight", n)
	}
	noActions := func(where string) {
		t.Helper()
		if n := eval[int](tb, `document.querySelectorAll('main button[data-action], main button[data-bulk]').length`); n != 0 {
			t.Errorf("a read token is offered %d actions on %s", n, where)
		}
	}
	noActions("the overview")
	tb.page("dead-letters")
	tb.until("three groups", `document.querySelectorAll('article.group').length === 3`)
	noActions("the dead letters")
	tb.do("filter by stream",
		chromedp.SendKeys(chromedp.CSS(`form[role=search] input[name=stream]`), "order-2"),
		chromedp.Click(chromedp.CSS(`form[role=search] button[type=submit]`)))
	tb.until("one entry of one group", `document.querySelectorAll('article.group').length === 1 && document.querySelector('article.group .count').textContent === '1 entry'`)
	tb.do("clear the filter", chromedp.Click(chromedp.CSS(`form[role=search] button[type=reset]`)))
	tb.until("three groups again", `document.querySelectorAll('article.group').length === 3`)
	tb.do("open an entry",
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`article[data-fingerprint=%q] summary`, f.hostile.Fingerprint))),
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`a[href="#/dead-letters/%s"]`, f.hostile.ID))))
	tb.until("the entry shows", `document.querySelector('pre.payload') !== null`)
	shown := eval[string](tb, `document.querySelector('pre.payload').textContent`)
	if !strings.Contains(shown, `"<img src=x onerror=alert(1)><script>alert(2)</script>\u0000\u202e"`) {
		t.Errorf("the hostile payload is not shown as text: %q", shown)
	}
	if !eval[bool](tb, `[...document.querySelectorAll('main td code')].some(c => c.textContent === '<b>bold</b>')`) {
		t.Error("the hostile header is not shown as text")
	}
	if n := eval[int](tb, `document.querySelectorAll('main img, main script, main b').length`); n != 0 {
		t.Errorf("%d elements made of a payload or header", n)
	}
	if n := eval[int](tb, `document.querySelectorAll('main button').length`); n != 0 {
		t.Errorf("a read token is offered %d buttons on an entry", n)
	}
	tb.page("streams")
	tb.until("the blocked stream shows", `document.querySelector('article[data-stream="customer-7"] .why') !== null`)
	noActions("the streams")
	tb.page("messages")
	tb.until("messages listed", `document.querySelectorAll('main tbody tr').length > 0`)
	tb.do("open a message", chromedp.Click(chromedp.CSS(`main tbody tr a`)))
	tb.until("the message shows", `document.querySelector('main dl.fields') !== null`)
	noActions("a message")
	tb.page("workflows")
	tb.until("the runs are listed", `document.querySelector('a[data-run="etl-1"]') !== null && document.querySelector('a[data-run="etl-2"]') !== null`)
	tb.do("open the run nobody drives", chromedp.Click(chromedp.CSS(`a[data-run="etl-2"]`)))
	// The list holds four runs too: wait for the run's own page.
	tb.until("its tasks show", `document.querySelector('main h1')?.textContent === 'Run etl-2' && document.querySelectorAll('main tbody tr').length === 4`)
	// The server has no DAG definitions: the edges are those the run kept,
	// the tasks come in dependency order and say what they wait for.
	tasks := eval[[]string](tb, `[...document.querySelectorAll('main tbody tr')].map(r => [...r.cells].slice(0, 5).map(c => c.textContent).join('|'))`)
	want := []string{
		"extract|pending|—|0|pending: ready, waiting for a free worker",
		"audit|pending|extract|0|pending: waiting for upstream task extract",
		"validate|pending|extract|0|pending: waiting for upstream task extract",
		"load|pending|validate|0|pending: waiting for upstream task validate",
	}
	if len(tasks) != len(want) {
		t.Fatalf("task rows %q, want %q", tasks, want)
	}
	for i := range want {
		if !strings.HasPrefix(tasks[i], want[i]) {
			t.Errorf("task row %d: %q, want it to start with %q", i, tasks[i], want[i])
		}
	}
	noActions("a workflow run")
	// The hostile run: found by its ID, its tasks' IDs shown as text.
	tb.page("workflows")
	tb.until("the hostile run is listed", fmt.Sprintf(`[...document.querySelectorAll('a[data-run]')].some(a => a.dataset.run === %q)`, hostileRun))
	tb.until("the hostile run opens", fmt.Sprintf(`([...document.querySelectorAll('a[data-run]')].find(a => a.dataset.run === %q).click(), true)`, hostileRun))
	tb.until("its tasks show", `document.querySelector('main section[aria-label="Run"]') !== null && document.querySelectorAll('main tbody tr').length === 2`)
	odd := eval[[]string](tb, `[...document.querySelectorAll('main tbody tr')].map(r => r.cells[0].textContent + '|' + r.cells[2].textContent)`)
	if want := []string{hostileTask + "|—", "a\tb/c?d#e|" + hostileTask}; !slices.Equal(odd, want) {
		t.Errorf("hostile task rows %q, want %q", odd, want)
	}
	// As text, its ESC and right-to-left override as their escapes.
	shownRun := strings.NewReplacer("\x1b", `\u001b`, "\u202e", `\u202e`).Replace(hostileRun)
	if shown := eval[bool](tb, fmt.Sprintf(`document.querySelector('main').textContent.includes(%q)`, shownRun)); !shown {
		t.Errorf("the hostile run's ID is not shown as text (as %+q)", shownRun)
	}
	if pwned := eval[bool](tb, `window.pwned !== undefined`); pwned {
		t.Error("a workflow ID ran as markup")
	}
	// The run named "..": its page asks for it by query (a path segment
	// ".." is removed by the browser, even written %2E).
	tb.page("workflows")
	tb.until("the run named .. opens", `(document.querySelector('a[data-run=".."]')?.click(), document.querySelector('main h1')?.textContent === 'Run ..')`)
	tb.until("its tasks show", `document.querySelectorAll('main tbody tr').length === 4`)

	// A page left while its poll is out stays left: the run page's next
	// poll is held, the operator goes back to the list, then the poll's
	// answer comes. It drew the run over the list before.
	f.gate.hold("/v1/workflows/run?id=etl-1")
	// Count the answers to etl-1 the page has read: once the count goes
	// up, what the page does with that answer runs before the next task.
	eval[bool](tb, `(() => {
		window.runReads = 0;
		const fetch0 = window.fetch;
		window.fetch = async (...args) => {
			const resp = await fetch0(...args);
			if (!String(args[0]).endsWith('/workflows/run?id=etl-1')) return resp;
			const text0 = resp.text.bind(resp);
			resp.text = async () => { const t = await text0(); setTimeout(() => window.runReads++); return t; };
			return resp;
		};
		return true;
	})()`)
	tb.do("open the list", chromedp.Click(chromedp.CSS(`nav a[data-page="workflows"]`)))
	tb.until("the runs are listed again", `document.querySelector('a[data-run="etl-1"]') !== null`)
	tb.do("open etl-1", chromedp.Click(chromedp.CSS(`a[data-run="etl-1"]`)))
	select {
	case <-f.gate.held:
	case <-time.After(30 * time.Second):
		t.Fatal("the run page asked nothing of the API")
	}
	tb.do("go back to the list", chromedp.Click(chromedp.CSS(`nav a[data-page="workflows"]`)))
	tb.until("the list shows", `document.querySelector('a[data-run="etl-1"]') !== null && location.hash === '#/workflows'`)
	reads := eval[int](tb, `window.runReads`)
	close(f.gate.release)
	<-f.gate.done
	tb.until("the page read the held answer", fmt.Sprintf(`window.runReads > %d`, reads))
	if stale := eval[bool](tb, `document.querySelector('a[data-run="etl-1"]') === null`); stale {
		t.Error("a run page's late answer drew the run over the list the operator had gone back to")
	}
	status := eval[int](tb, fmt.Sprintf(`fetch('/v1/dlq/%s/replay', {method: 'POST', headers: {Authorization: 'Bearer ' + sessionStorage.getItem('backstop.token')}}).then(r => r.status)`, f.hostile.ID))
	if status != 403 {
		t.Errorf("a replay with the read token: status %d, want 403", status)
	}
	e, err := f.st.DLQ().Get(context.Background(), f.hostile.ID)
	if err != nil || e.Status != "pending" {
		t.Errorf("entry after a read token's replay: %v %v, want pending", e.Status, err)
	}
	if errs := tb.consoleErrors("status of 403", "status of 401"); len(errs) > 0 {
		t.Errorf("console errors: %q", errs)
	}
	// The refused requests reached the console: the listener that finds
	// no error on the other pages does hear them.
	if all := tb.consoleErrors(); len(all) == 0 {
		t.Error("the console showed no 403: is the console listened to?")
	}
}

// operate releases a blocked stream, replays an entry and bulk-replays a
// group by clicking, and checks that the messages reach the destination.
func operate(t *testing.T, b context.Context, f *fixture, shots bool) {
	tb := newTab(t, b, f.url, shots)
	tb.open()
	tb.signIn(operateToken, "operate")
	stop := f.trickle(t)
	tb.until("the overview counts the dead letters", `document.querySelector('[data-tile="Dead letters"]')?.textContent === '6'`)
	points := 4
	if shots {
		points = 40 // ten seconds of samples: a chart worth a picture
	}
	tb.until("the chart draws rates as they come", fmt.Sprintf(`(document.querySelector('.chart polyline.s-delivered')?.getAttribute('points') || '').split(' ').length >= %d`, points))
	stop()
	tb.screenshot("overview")
	if shots {
		tb.do("phone width", chromedp.EmulateViewport(390, 844))
		tb.screenshot("overview-phone")
		tb.do("desktop width", chromedp.EmulateViewport(1280, 860))
	}

	tb.page("streams")
	card := `article[data-stream="customer-7"]`
	tb.until("the blocked stream says why", fmt.Sprintf(`(document.querySelector('%s .why')?.textContent || '').length > 20`, card))
	tb.screenshot("streams")
	if f.hook.has(f.held) {
		t.Fatal("the message behind the dead letter arrived before the release")
	}
	tb.do("release", chromedp.Click(chromedp.CSS(card+` button[data-action=release]`)))
	tb.confirm()
	f.hook.waitFor(t, "release", f.held)
	// A stream named "..": a browser drops such a path segment, even
	// written %2E, so the page names the stream in the query.
	for _, name := range []string{".", ".."} {
		hash := "#/streams/orders/" + name
		tb.do("open the stream "+name, chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`document.getElementById('content').replaceChildren(); location.hash = %q`, hash)))
		tb.until("the stream "+name+" shows", fmt.Sprintf(`(document.querySelector('article[data-stream=%q] .why')?.textContent || '') === 'no undelivered messages'`, name))
	}

	tb.page("dead-letters")
	tb.until("three groups", `document.querySelectorAll('article.group').length === 3`)
	tb.screenshot("dead-letters")
	if shots {
		tb.do("phone width", chromedp.EmulateViewport(390, 844))
		tb.screenshot("dead-letters-phone")
		tb.do("desktop width", chromedp.EmulateViewport(1280, 860))
	}
	bin := f.binary
	tb.do("open an entry",
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`article[data-fingerprint=%q] summary`, bin.Fingerprint))),
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`a[href="#/dead-letters/%s"]`, bin.ID))))
	tb.until("the payload shows in hex", `document.querySelector('pre.payload[aria-label="Payload (hex)"]') !== null`)
	tb.screenshot("dead-letter")
	tb.do("replay", chromedp.Click(chromedp.CSS(`main button[data-action=replay]`)))
	tb.confirm()
	f.hook.waitFor(t, "replay of one entry", bin.MessageID)
	tb.until("the audit trail shows the replay", `[...document.querySelectorAll('main td')].some(td => td.textContent === 'replay')`)

	tb.page("dead-letters")
	group := fmt.Sprintf(`article[data-fingerprint=%q]`, f.refused[0].Fingerprint)
	tb.until("the group of three", fmt.Sprintf(`document.querySelector('%s .count')?.textContent === '3 entries'`, strings.ReplaceAll(group, `"`, `\"`)))
	tb.do("bulk replay", chromedp.Click(chromedp.CSS(group+` button[data-bulk=replay]`)))
	tb.until("the dry run counts", `document.querySelector('#dialog [data-dry-count]')?.dataset.dryCount === '3'`)
	if n := eval[int](tb, `document.querySelectorAll('#dialog tbody tr').length`); n != 3 {
		t.Errorf("the dry run shows %d sample rows, want 3", n)
	}
	for _, e := range f.refused {
		if f.hook.has(e.MessageID) {
			t.Fatal("a message of the group arrived before the bulk replay was confirmed")
		}
	}
	tb.screenshot("bulk-dry-run")
	tb.confirm()
	ids := make([]string, len(f.refused))
	for i, e := range f.refused {
		ids[i] = e.MessageID
	}
	f.hook.waitFor(t, "bulk replay", ids...)
	tb.until("the group leaves the pending entries", fmt.Sprintf(`document.querySelector('%s') === null`, strings.ReplaceAll(group, `"`, `\"`)))

	tb.do("open the stuck entry",
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`article[data-fingerprint=%q] summary`, f.stuck.Fingerprint))),
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`a[href="#/dead-letters/%s"]`, f.stuck.ID))))
	tb.do("resolve with notes",
		chromedp.Click(chromedp.CSS(`main button[data-action=resolve]`)),
		chromedp.WaitVisible(chromedp.CSS(`#dialog textarea`)),
		chromedp.SendKeys(chromedp.CSS(`#dialog textarea`), "unlocked the account <b>by hand</b>"))
	tb.confirm()
	tb.until("the audit trail shows the notes", `[...document.querySelectorAll('main td')].some(td => td.textContent === 'unlocked the account <b>by hand</b>')`)
	if e, err := f.st.DLQ().Get(context.Background(), f.stuck.ID); err != nil || e.Status != "resolved" || e.ResolutionNotes != "unlocked the account <b>by hand</b>" {
		t.Errorf("the resolved entry: %+v %v", e, err)
	}

	tb.page("messages")
	tb.do("search a stream",
		chromedp.SendKeys(chromedp.CSS(`form[role=search] input[name=stream]`), "customer-7"),
		chromedp.Click(chromedp.CSS(`form[role=search] button[type=submit]`)))
	tb.until("the stream's two messages", `document.querySelectorAll('main tbody tr').length === 2`)
	tb.screenshot("messages")
	tb.do("open a message", chromedp.Click(chromedp.CSS(`main tbody tr a`)))
	tb.until("the message shows", `document.querySelector('main dl.fields') !== null`)
	tb.screenshot("message")
	if errs := tb.consoleErrors(); len(errs) > 0 {
		t.Errorf("console errors: %q", errs)
	}
}
