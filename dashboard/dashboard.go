// Package dashboard is Backstop's web dashboard: HTML, CSS and JavaScript
// embedded in the binary and served by Handler. It is a pure client of the
// admin API (package admin, under /v1): it keeps the operator's bearer
// token in the browser's sessionStorage, sends it with every request, and
// offers the actions of the token's role only.
//
// The pages are an overview (rates over time, the dead-letter queue's depth
// and age, the scheduled backlog, blocked streams, each destination's
// state), the dead letters grouped by error fingerprint with single and
// bulk actions behind a dry run, the blocked streams with why in words, and
// a message search. Nothing is fetched from beyond the server: no CDN, no
// bundler, no Node at build or run time.
package dashboard

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

//go:embed assets
var assets embed.FS

// Assets returns the dashboard's files (index.html at the root).
func Assets() fs.FS {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the directory is embedded: cannot happen
	}
	return sub
}

// contentSecurityPolicy allows the server's own scripts, styles, images
// and API only: a payload shown on a page can never load or run anything.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// Handler serves the dashboard. Mount it at the root or under a prefix
// with http.StripPrefix (for instance at /ui/); the pages call the admin
// API at /v1 on the same host either way. Unknown paths answer 404; the
// pages route among themselves in the URL's fragment (#/dead-letters),
// so that any path of the app is index.html.
func Handler() http.Handler {
	files := Assets()
	static := http.FileServerFS(files)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		// The assets change with the binary; a revalidation is cheap.
		h.Set("Cache-Control", "no-cache")
		name := strings.TrimPrefix(path.Clean("/"+r.URL.Path), "/")
		if name == "" || name == "index.html" {
			serveIndex(w, r, files)
			return
		}
		if fi, err := fs.Stat(files, name); err != nil || fi.IsDir() {
			http.NotFound(w, r)
			return
		}
		static.ServeHTTP(w, r)
	})
}

func serveIndex(w http.ResponseWriter, r *http.Request, files fs.FS) {
	b, err := fs.ReadFile(files, "index.html")
	if err != nil {
		http.Error(w, "index.html missing from the build", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(b)
}
