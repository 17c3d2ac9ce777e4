package admin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"sync"
	"time"
)

// ProgressHeader is the request header by which a client asks the API to
// report, while it works on a long request (a bulk action, a purge), that
// it still does: informational 102 Processing answers before the final
// one. Client sends it when it has a Timeout. A client that does not send
// it gets no informational answer (some HTTP clients take the first
// status line they read for the answer).
const ProgressHeader = "Backstop-Progress"

// ErrNoAnswer is the error (under a *NoAnswerError) of a request the
// server did not answer within the client's Timeout.
var ErrNoAnswer = errors.New("the server did not answer in time")

// NoAnswerError is a request the server did not answer in time: it
// accepted the connection (or not even that) and said nothing for
// Timeout, before its answer or in the middle of it.
type NoAnswerError struct {
	Method, Path string
	Timeout      time.Duration
}

func (e *NoAnswerError) Error() string {
	return fmt.Sprintf("admin: %s %s: the server did not answer within %s", e.Method, e.Path, e.Timeout)
}

// Unwrap returns ErrNoAnswer.
func (e *NoAnswerError) Unwrap() error { return ErrNoAnswer }

// watchdog cancels a request once the server has said nothing for its
// time: no connection, no byte of the answer, no progress report.
type watchdog struct {
	d      time.Duration
	mu     sync.Mutex
	t      *time.Timer
	cancel context.CancelCauseFunc
}

// watch bounds req by c.Timeout, from now and again from each sign of
// life. It returns the request to send and stop, which ends the watch.
func (c *Client) watch(req *http.Request) (*http.Request, *watchdog) {
	if c.Timeout <= 0 {
		return req, nil
	}
	ctx, cancel := context.WithCancelCause(req.Context())
	w := &watchdog{d: c.Timeout, cancel: cancel}
	w.t = time.AfterFunc(c.Timeout, func() { cancel(ErrNoAnswer) })
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		Got1xxResponse: func(int, textproto.MIMEHeader) error {
			w.alive()
			return nil
		},
	})
	req = req.WithContext(ctx)
	req.Header.Set(ProgressHeader, "102")
	return req, w
}

// alive starts the wait again, unless it is over.
func (w *watchdog) alive() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.t.Stop() {
		w.t.Reset(w.d)
	}
}

// stop ends the watch and cancels what is left of the request.
func (w *watchdog) stop() {
	if w == nil {
		return
	}
	w.t.Stop()
	w.cancel(nil)
}

// body is an answer's body whose every read is a sign of life.
func (w *watchdog) body(rc io.ReadCloser) io.ReadCloser {
	if w == nil {
		return rc
	}
	return &watchedBody{ReadCloser: rc, w: w}
}

type watchedBody struct {
	io.ReadCloser
	w *watchdog
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.w.alive()
	}
	return n, err
}

// err is err, or a *NoAnswerError when the watch ended the request.
func (w *watchdog) err(req *http.Request, path string, err error) error {
	if w == nil || err == nil || !errors.Is(context.Cause(req.Context()), ErrNoAnswer) {
		return err
	}
	return &NoAnswerError{Method: req.Method, Path: path, Timeout: w.d}
}
