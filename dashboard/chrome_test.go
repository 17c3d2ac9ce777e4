package dashboard_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/backstophq/backstop/internal/testenv"
)

// ChromiumEnv names the browser the tests drive when it is not
// /usr/bin/chromium (or chromium on the PATH).
const ChromiumEnv = "BACKSTOP_CHROMIUM"

// ScreenshotsEnv, set to 1, makes the SQLite run save a screenshot of each
// page in docs/screenshots.
const ScreenshotsEnv = "BACKSTOP_SCREENSHOTS"

// browser starts one headless Chromium for the test, or skips (fails under
// CI=true) when there is none.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := os.Getenv(ChromiumEnv)
	if path == "" {
		path = "/usr/bin/chromium"
		if _, err := os.Stat(path); err != nil {
			if p, err := exec.LookPath("chromium"); err == nil {
				path = p
			}
		}
	}
	if _, err := os.Stat(path); err != nil {
		msg := "no Chromium at " + path + " (install Debian's chromium or set " + ChromiumEnv + ")"
		if testenv.InCI() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.UserDataDir(t.TempDir()))
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}
	return ctx
}

// tab is a browser tab on the fixture's server that records what the page
// writes to its console.
type tab struct {
	t    *testing.T
	ctx  context.Context
	url  string
	shot bool // save screenshots

	mu   sync.Mutex
	errs []string
}

func newTab(t *testing.T, browserCtx context.Context, url string, shots bool) *tab {
	ctx, cancel := chromedp.NewContext(browserCtx)
	t.Cleanup(cancel)
	tb := &tab{t: t, ctx: ctx, url: url, shot: shots}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 860)); err != nil {
		t.Fatal(err)
	}
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				tb.mu.Lock()
				tb.errs = append(tb.errs, m.String())
				tb.mu.Unlock()
			}
		}
	}()
	return tb
}

// consoleErrors returns what the page reported as errors, leaving out the
// failed requests whose status the test expected (a read token's 403).
func (tb *tab) consoleErrors(expected ...string) []string {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	var out []string
next:
	for _, e := range tb.errs {
		for _, x := range expected {
			if strings.Contains(e, x) {
				continue next
			}
		}
		out = append(out, e)
	}
	return out
}

// do runs the steps, failing the test with what was being done.
func (tb *tab) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	tb.t.Helper()
	defer tb.timed(what)()
	ctx, cancel := context.WithTimeout(tb.ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		tb.t.Fatalf("%s: %v (console: %q)", what, err, tb.consoleErrors())
	}
}

// until waits for a JavaScript condition on the page.
func (tb *tab) until(what, expr string) {
	tb.t.Helper()
	defer tb.timed(what)()
	ctx, cancel := context.WithTimeout(tb.ctx, 60*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(50*time.Second), chromedp.WithPollingInterval(25*time.Millisecond)))
	if err != nil {
		text, _ := chromedp.Run(tb.ctx, chromedp.Evaluate[string](`location.hash + '\n' + document.body.innerText`))
		tb.t.Fatalf("%s: %v\nconsole: %q\npage: %.3000s", what, err, tb.consoleErrors(), text)
	}
}

func (tb *tab) timed(what string) func() {
	start := time.Now()
	return func() { tb.t.Logf("%6.0f ms %s", float64(time.Since(start).Microseconds())/1000, what) }
}

// eval returns the value of a JavaScript expression.
func eval[T any](tb *tab, expr string) T {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		tb.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// screenshot saves the page as docs/screenshots/name.png when asked to.
func (tb *tab) screenshot(name string) {
	tb.t.Helper()
	if !tb.shot {
		return
	}
	ctx, cancel := context.WithTimeout(tb.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		tb.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join("..", "docs", "screenshots", name+".png"), png, 0o644); err != nil {
		tb.t.Fatal(err)
	}
}

func (tb *tab) open() {
	tb.t.Helper()
	tb.do("open the dashboard",
		chromedp.Navigate(tb.url+"/?poll=250"),
		chromedp.WaitVisible(chromedp.CSS(`input[name=token]`)),
	)
	if eval[bool](tb, `getComputedStyle(document.querySelector('header.top')).display !== 'none'`) {
		tb.t.Error("the navigation shows before sign-in")
	}
}

func (tb *tab) signIn(token, role string) {
	tb.t.Helper()
	tb.screenshot("sign-in")
	tb.do("sign in",
		chromedp.Evaluate[chromedp.Void](`document.querySelector('input[name=token]').value = ''`),
		chromedp.SendKeys(chromedp.CSS(`input[name=token]`), token),
		chromedp.Click(chromedp.CSS(`form.login button[type=submit]`)),
	)
	tb.until("the role shows", fmt.Sprintf(`document.getElementById('role').textContent === %q`, role))
}

// page clicks a link of the navigation and waits for the page.
func (tb *tab) page(name string) {
	tb.t.Helper()
	tb.do("open "+name, chromedp.Click(chromedp.CSS(fmt.Sprintf(`nav a[data-page=%q]`, name))))
	tb.until(name+" shows", fmt.Sprintf(`document.getElementById('content').dataset.page === %q`, name))
}

func (tb *tab) confirm() {
	tb.t.Helper()
	tb.do("confirm", chromedp.WaitVisible(chromedp.CSS(`#dialog button[data-confirm]:not([disabled])`)))
	tb.do("confirm", chromedp.Click(chromedp.CSS(`#dialog button[data-confirm]`)))
	tb.until("the dialog closes", `!document.getElementById('dialog').open`)
}
