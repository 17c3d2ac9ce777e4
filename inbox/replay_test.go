package inbox

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestHTTPReplayAfterTheIDIsForgotten: a signed request is accepted while
// its timestamp is within the tolerance of now, so up to twice the
// tolerance after it was first received; only its id's de-duplication
// record stops a replay meanwhile. An inbox whose DedupWindow is shorter
// (1 min here, against the default 5 min tolerance) forgets the id first,
// and the same captured request, replayed unchanged, is stored and handled
// a second time. The config file (internal/config) refuses such a source;
// the library's HTTPHandler took it.
func TestHTTPReplayAfterTheIDIsForgotten(t *testing.T) {
	t.Parallel()
	e := newEnv(t, kinds[0])
	cfg := e.config()
	cfg.DedupWindow = time.Minute
	in := e.newInbox(cfg)
	h, err := in.HTTPHandler(HTTPConfig{Secrets: [][]byte{[]byte(secret)}})
	if errors.Is(err, ErrInvalidConfig) {
		return // refused: the replay cannot happen
	}
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"type":"order.created"}`)
	sent := e.clk.Now()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, signed(t, secret, "msg_replayed", sent, body, nil))
	if w.Code != StatusStored {
		t.Fatalf("first request answered %d (%s)", w.Code, strings.TrimSpace(w.Body.String()))
	}
	e.clk.Advance(2 * time.Minute) // past the window, within the tolerance
	if _, err := in.Sweep(e.ctx); err != nil {
		t.Fatal(err)
	}
	w = httptest.NewRecorder()
	h.ServeHTTP(w, signed(t, secret, "msg_replayed", sent, body, nil)) // the same request, replayed
	if w.Code == StatusStored {
		t.Errorf("the replayed request was stored again (answered %d): the message will be handled twice", w.Code)
	}
	if n := e.count(`SELECT count(*) FROM ` + kinds[0].outbox(e.spec)); n != 1 {
		t.Errorf("%d rows for one signed request, want 1", n)
	}
}
