package admin

import (
	"net/http"
	"sync"
	"time"
)

// DefaultProgressInterval is Config.ProgressInterval's default.
const DefaultProgressInterval = 5 * time.Second

// reporting runs h, a long request's handler (a bulk action, a purge),
// and while it runs tells a client that asked for it (ProgressHeader)
// every ProgressInterval that the request is still being worked on: an
// informational 102 Processing answer. A client that gives up on a server
// that says nothing for a while (Client.Timeout) then waits for as long as
// the action takes, and gives up on a server that stopped answering.
func (s *Server) reporting(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.ProgressInterval < 0 || r.Header.Get(ProgressHeader) == "" || !r.ProtoAtLeast(1, 1) {
			h(w, r)
			return
		}
		pw := &progressWriter{ResponseWriter: w, header: w.Header().Clone()}
		stop, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			t := time.NewTicker(s.cfg.ProgressInterval)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
					pw.report()
				}
			}
		}()
		defer func() { close(stop); <-done }()
		h(pw, r)
	}
}

// progressWriter is a ResponseWriter that sends progress reports until
// the handler starts its answer. A report writes the answer's header map
// out (a 1xx answer carries the headers set so far), so the handler sets
// its headers on a map of its own, copied into the answer's as it starts
// its answer: on one map, a report read it while the handler wrote it.
type progressWriter struct {
	http.ResponseWriter
	header   http.Header // the handler's
	mu       sync.Mutex
	answered bool
}

// Header is the handler's map until the answer starts, then the answer's
// (trailers are set there).
func (p *progressWriter) Header() http.Header {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.answered {
		return p.ResponseWriter.Header()
	}
	return p.header
}

func (p *progressWriter) report() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.answered {
		p.ResponseWriter.WriteHeader(http.StatusProcessing)
	}
}

// answer marks the answer started, its headers the handler's; p.mu held.
func (p *progressWriter) answer() {
	if p.answered {
		return
	}
	p.answered = true
	h := p.ResponseWriter.Header()
	clear(h)
	for k, v := range p.header {
		h[k] = v
	}
}

func (p *progressWriter) WriteHeader(code int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.answer()
	p.ResponseWriter.WriteHeader(code)
}

func (p *progressWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.answer()
	return p.ResponseWriter.Write(b)
}

// Unwrap gives http.ResponseController the writer underneath.
func (p *progressWriter) Unwrap() http.ResponseWriter { return p.ResponseWriter }
