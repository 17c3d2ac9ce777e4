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
		pw := &progressWriter{ResponseWriter: w}
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
// the handler starts its answer.
type progressWriter struct {
	http.ResponseWriter
	mu       sync.Mutex
	answered bool
}

func (p *progressWriter) report() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.answered {
		p.ResponseWriter.WriteHeader(http.StatusProcessing)
	}
}

func (p *progressWriter) WriteHeader(code int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.answered = true
	p.ResponseWriter.WriteHeader(code)
}

func (p *progressWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.answered = true
	return p.ResponseWriter.Write(b)
}

// Unwrap gives http.ResponseController the writer underneath.
func (p *progressWriter) Unwrap() http.ResponseWriter { return p.ResponseWriter }
