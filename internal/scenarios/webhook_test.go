package scenarios

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/backstophq/backstop/transport"
	"github.com/backstophq/backstop/transport/webhook"
)

// secret signs the scenarios' webhook requests; the server verifies them.
var secret = []byte("scenario-secret")

// reply is how the server answers one request.
type reply struct {
	status     int             // 0 means 200
	retryAfter string          // the Retry-After header, when not empty
	body       string          // the response body
	hangUp     bool            // close the connection without answering
	hold       <-chan struct{} // answer only once this is closed
}

// code is the status the reply answers with; 0 for a hang-up.
func (r reply) code() int {
	switch {
	case r.hangUp:
		return 0
	case r.status == 0:
		return http.StatusOK
	}
	return r.status
}

// script picks the reply to the n-th request (from 1) it is asked about.
type script func(n int) reply

// failing answers r to the first times requests, then 200.
func failing(times int, r reply) script {
	return func(n int) reply {
		if n <= times {
			return r
		}
		return reply{}
	}
}

// always answers r.
func always(r reply) script { return func(int) reply { return r } }

// received is one request the server got.
type received struct {
	payload string
	id      string // webhook-id
	stream  string // Backstop-Stream
	attempt string // Backstop-Attempt
	relay   string // X-Relay: the relay instance that sent it
	status  int    // what it was answered; 0 for a hang-up
	at      time.Time
}

// hook is a local webhook destination that fails as the test scripts it.
// A request is answered by the script of the relay that sent it, else of
// its payload, else by the phase script, else 200. Down makes it refuse
// connections until Up.
type hook struct {
	e       *env
	srv     *http.Server
	addr    string
	dials   atomic.Int64 // connections the counting client opened or tried
	closing chan struct{}

	mu        sync.Mutex
	ln        net.Listener
	byRelay   map[string]script
	byPayload map[string]script
	phase     script
	asked     map[string]int // requests per script key
	log       []received
}

// newHook starts a hook on a port below the ephemeral range, so that no
// outgoing connection can take it while the hook is down.
func (e *env) newHook() *hook {
	e.t.Helper()
	h := &hook{
		e: e, closing: make(chan struct{}),
		byRelay: map[string]script{}, byPayload: map[string]script{}, asked: map[string]int{},
	}
	h.srv = &http.Server{Handler: http.HandlerFunc(h.serve), ReadHeaderTimeout: 10 * time.Second}
	for i := 0; h.ln == nil; i++ {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", 20000+rand.IntN(12000)))
		if err != nil && i == 50 {
			e.t.Fatalf("no free port for the webhook: %v", err)
		}
		h.ln = ln
	}
	h.addr = h.ln.Addr().String()
	go func(ln net.Listener) { _ = h.srv.Serve(ln) }(h.ln)
	e.t.Cleanup(func() {
		close(h.closing)
		_ = h.srv.Close()
	})
	return h
}

// transport is the real webhook transport to the hook for relay id (sent
// as X-Relay), with the transport's own HTTP client, or with the hook's
// counting client when counting is set.
func (h *hook) transport(id string, counting bool) transport.Transport {
	h.e.t.Helper()
	cfg := webhook.Config{
		URL:     "http://" + h.addr + "/events",
		Secret:  secret,
		Headers: map[string]string{"X-Relay": id},
		Clock:   h.e.clk,
	}
	if counting {
		cfg.Client = h.countingClient()
	}
	tr, err := webhook.New(cfg)
	if err != nil {
		h.e.t.Fatal(err)
	}
	h.e.t.Cleanup(func() { _ = tr.Close() })
	return tr
}

// countingClient is an HTTP client that counts the connections it dials,
// refused ones included: how often the relay tried a hook that is down.
func (h *hook) countingClient() *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			h.dials.Add(1)
			defer h.e.changed.fire()
			return d.DialContext(ctx, network, addr)
		},
		MaxIdleConnsPerHost: 32,
	}
	h.e.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func (h *hook) onRelay(id string, s script) { h.set(func() { h.byRelay[id] = s }) }

func (h *hook) onPayload(p string, s script) { h.set(func() { h.byPayload[p] = s }) }

// setPhase answers every request without a script of its own with s; nil
// means 200.
func (h *hook) setPhase(s script) { h.set(func() { h.phase = s }) }

func (h *hook) set(fn func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	fn()
}

// down closes the listener, and the idle connections to it: connections
// are refused until up.
func (h *hook) down() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ln != nil {
		_ = h.ln.Close()
		h.ln = nil
	}
	h.srv.SetKeepAlivesEnabled(false)
}

// up listens again on the same address.
func (h *hook) up() {
	h.e.t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ln != nil {
		return
	}
	ln, err := net.Listen("tcp", h.addr)
	if err != nil {
		h.e.t.Fatalf("webhook up again on %s: %v", h.addr, err)
	}
	h.ln = ln
	h.srv.SetKeepAlivesEnabled(true)
	go func() { _ = h.srv.Serve(ln) }()
}

func (h *hook) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	if err := webhook.Verify(secret, r.Header, body, h.e.clk.Now(), 0); err != nil {
		h.e.t.Errorf("webhook request for %q: %v", body, err)
	}
	rq := received{
		payload: string(body), id: r.Header.Get(webhook.HeaderMessageID), stream: r.Header.Get(webhook.HeaderStream),
		attempt: r.Header.Get(webhook.HeaderAttempt), relay: r.Header.Get("X-Relay"), at: h.e.clk.Now(),
	}
	h.mu.Lock()
	var rep reply
	switch {
	case h.byRelay[rq.relay] != nil:
		rep = h.ask("relay "+rq.relay, h.byRelay[rq.relay])
	case h.byPayload[rq.payload] != nil:
		rep = h.ask(rq.payload, h.byPayload[rq.payload])
	case h.phase != nil:
		rep = h.ask(rq.payload, h.phase)
	}
	rq.status = rep.code()
	h.log = append(h.log, rq)
	h.mu.Unlock()
	h.e.changed.fire()

	if rep.hold != nil {
		select {
		case <-rep.hold:
		case <-h.closing:
		}
	}
	if rep.hangUp {
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			_ = conn.Close()
		}
		return
	}
	if rep.retryAfter != "" {
		w.Header().Set("Retry-After", rep.retryAfter)
	}
	w.WriteHeader(rep.code())
	_, _ = io.WriteString(w, rep.body)
}

// ask counts a request for key and returns the script's reply to it.
func (h *hook) ask(key string, s script) reply {
	h.asked[key]++
	return s(h.asked[key])
}

// requests returns the requests received so far, in order.
func (h *hook) requests() []received {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]received(nil), h.log...)
}

// count returns how many requests carried payload p.
func (h *hook) count(p string) int {
	n := 0
	for _, rq := range h.requests() {
		if rq.payload == p {
			n++
		}
	}
	return n
}

// delivered returns the payloads answered 200, in the order they came.
func (h *hook) delivered() []string {
	var out []string
	for _, rq := range h.requests() {
		if rq.status == http.StatusOK {
			out = append(out, rq.payload)
		}
	}
	return out
}

// attempt parses a Backstop-Attempt header; 0 when it is not a number.
func attempt(rq received) int {
	n, _ := strconv.Atoi(rq.attempt)
	return n
}
