package chaos

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop/transport/webhook"
)

// secret signs the relays' requests; the receiver verifies every one.
const secret = "whsec_Y2hhb3Mtc3VpdGUtc2lnbmluZy1rZXktMzItYnl0ZXM="

// The receiver's answers to deliveries.
const (
	modeUp   int32 = iota // 204 to everything but unfixed poison (422)
	mode503               // 503 Service Unavailable to everything
	modeDown              // no listener: connections are refused
)

// body is a chaos message's payload.
type body struct {
	Stream string `json:"s"`
	N      int    `json:"n"`
	Poison bool   `json:"poison,omitempty"`
}

// receiver is the webhook destination: it verifies each request's
// signature, answers according to its mode, and records every accepted
// delivery in its ledger.
type receiver struct {
	t      testing.TB
	ledger *ledger
	addr   string
	mode   atomic.Int32

	mu       sync.Mutex
	srv      *http.Server
	fixed    map[string]bool // poison message ids the "fixed" receiver accepts
	trap     *trap
	rejected map[int]int // answers other than 2xx, by status
	badSigs  int
	cut      int // requests whose body ended early (a relay's send guard refused it)
}

func newReceiver(t testing.TB, l *ledger) *receiver {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("receiver: %v", err)
	}
	rc := &receiver{t: t, ledger: l, addr: ln.Addr().String(), fixed: map[string]bool{}, rejected: map[int]int{}}
	rc.serve(ln)
	t.Cleanup(func() {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		if rc.srv != nil {
			_ = rc.srv.Close()
		}
	})
	return rc
}

func (rc *receiver) url() string { return "http://" + rc.addr + "/hook" }

func (rc *receiver) serve(ln net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(rc.handle), ReadHeaderTimeout: 5 * time.Second}
	rc.srv = srv
	go func() { _ = srv.Serve(ln) }()
}

// setMode switches the receiver's answers. modeDown closes the listener
// and every open connection; leaving it listens again on the same address.
func (rc *receiver) setMode(m int32) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	old := rc.mode.Swap(m)
	switch {
	case m == modeDown && old != modeDown:
		_ = rc.srv.Close()
		rc.srv = nil
	case m != modeDown && old == modeDown:
		var ln net.Listener
		var err error
		deadline := time.Now().Add(5 * time.Second)
		for {
			// Reopening a just-closed port can race with the kernel's
			// cleanup; it succeeds within milliseconds.
			if ln, err = net.Listen("tcp", rc.addr); err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err != nil {
			rc.t.Errorf("receiver: listen again on %s: %v", rc.addr, err)
			return
		}
		rc.serve(ln)
	}
}

// fix makes the receiver accept the poison message id from now on.
func (rc *receiver) fix(id string) {
	rc.mu.Lock()
	rc.fixed[id] = true
	rc.mu.Unlock()
}

func (rc *receiver) reject(w http.ResponseWriter, status int) {
	rc.mu.Lock()
	rc.rejected[status]++
	rc.mu.Unlock()
	w.WriteHeader(status)
}

func (rc *receiver) handle(w http.ResponseWriter, r *http.Request) {
	raw, err := webhook.VerifyRequest(r, []byte(secret), 0)
	if err != nil && !errors.Is(err, webhook.ErrInvalidSignature) {
		// The body never came whole: the sender gave up on the request
		// after its headers (a relay continued after a stop past its
		// lease, whose send guard refused the body) or died writing it
		// (SIGKILL).
		rc.mu.Lock()
		rc.cut++
		rc.mu.Unlock()
		w.WriteHeader(http.StatusBadRequest) // nobody reads it
		return
	}
	if err != nil {
		rc.mu.Lock()
		rc.badSigs++
		rc.mu.Unlock()
		rc.reject(w, http.StatusUnauthorized)
		return
	}
	if rc.mode.Load() == mode503 {
		rc.reject(w, http.StatusServiceUnavailable)
		return
	}
	var b body
	if err := json.Unmarshal(raw, &b); err != nil {
		rc.t.Errorf("receiver: a payload that is not a chaos message: %q", raw)
		rc.reject(w, http.StatusBadRequest)
		return
	}
	id := r.Header.Get(webhook.HeaderMessageID)
	if b.Poison {
		rc.mu.Lock()
		ok := rc.fixed[id]
		rc.mu.Unlock()
		if !ok {
			rc.reject(w, http.StatusUnprocessableEntity)
			return
		}
	}
	instance := r.Header.Get("X-Chaos-Instance")
	rc.ledger.record(arrival{id: id, stream: b.Stream, n: b.N, at: time.Now(), instance: instance})
	tr := rc.sprung(instance)
	if tr != nil && tr.hold {
		// Processed, but the answer waits: the relay is mid-delivery.
		close(tr.caught)
		select {
		case <-tr.release:
		case <-r.Context().Done():
		}
	}
	w.WriteHeader(http.StatusNoContent)
	if tr != nil && !tr.hold {
		// Answered: the relay is about to record the delivery.
		http.NewResponseController(w).Flush()
		close(tr.caught)
	}
}

// trap catches the next accepted delivery of one relay instance.
type trap struct {
	instance string
	hold     bool          // hold the answer until release (else answer, then spring)
	caught   chan struct{} // closed when the delivery was accepted (and answered, unless hold)
	release  chan struct{} // closed by the test to let a held answer go
}

// setTrap arms a trap for instance's next accepted delivery.
func (rc *receiver) setTrap(instance string, hold bool) *trap {
	tr := &trap{instance: instance, hold: hold, caught: make(chan struct{}), release: make(chan struct{})}
	rc.mu.Lock()
	rc.trap = tr
	rc.mu.Unlock()
	return tr
}

// sprung disarms and returns the trap set for instance, if any.
func (rc *receiver) sprung(instance string) *trap {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	tr := rc.trap
	if tr == nil || tr.instance != instance {
		return nil
	}
	rc.trap = nil
	return tr
}

// wait waits for the trap to catch a delivery, at most timeout.
func (tr *trap) wait(timeout time.Duration) bool {
	select {
	case <-tr.caught:
		return true
	case <-time.After(timeout):
		return false
	}
}

// stats returns the rejected answers by status and the bad signatures.
func (rc *receiver) stats() (rejected map[int]int, badSigs, cut int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := make(map[int]int, len(rc.rejected))
	for k, v := range rc.rejected {
		out[k] = v
	}
	return out, rc.badSigs, rc.cut
}

var errDeadline = errors.New("deadline passed")
