package relay

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstophq/backstop/outbox"
	"github.com/backstophq/backstop/transport/webhook"
)

// webhookServer is a loopback receiver: hang, when not nil, holds every
// request until it is closed or the client goes away.
type webhookServer struct {
	srv      *httptest.Server
	received atomic.Int64
}

func newWebhookServer(t testing.TB, hang <-chan struct{}) *webhookServer {
	w := &webhookServer{}
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.received.Add(1)
		if hang != nil {
			select {
			case <-hang:
			case <-r.Context().Done():
				return
			}
		}
		rw.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(w.srv.Close)
	return w
}

func (w *webhookServer) transport(t testing.TB) *webhook.Transport {
	tr, err := webhook.New(webhook.Config{URL: w.srv.URL, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// streamed returns streams×per messages for dest, stream by stream
// interleaved, as many writers would enqueue them.
func streamed(dest string, streams, per int) []*outbox.Message {
	var out []*outbox.Message
	for i := range per {
		for s := range streams {
			out = append(out, msg(dest, fmt.Sprintf("%s-%d", dest, s), i))
		}
	}
	return out
}

// TestHangingWebhookBesideAFastOneWithDeepBacklogs: two webhook
// destinations with the relay's defaults, each 400 messages deep (past
// the default prefetch of 256) in forty strict streams, one of them a receiver that holds every request.
// Every message of the fast one is delivered while the hanging one's are
// stuck: the hanging destination holds no more than the workers the pool
// lets one destination take, its streams wait in its own share of the
// prefetch, and the fast one's strict streams are not behind them.
func TestHangingWebhookBesideAFastOneWithDeepBacklogs(t *testing.T) {
	t.Parallel()
	e := newEnv(t) // strict ordering
	// A longer safety net than newEnv's: the race detector on a loaded
	// machine takes half a minute to deliver the backlogs.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	e.ctx = ctx
	hang := make(chan struct{})
	slow, fast := newWebhookServer(t, hang), newWebhookServer(t, nil)
	slowMsgs, fastMsgs := streamed("slow", 40, 10), streamed("fast", 40, 10)
	e.enqueue(slowMsgs...) // first: the oldest work is the hanging destination's
	e.enqueue(fastMsgs...)
	cfg := e.config(map[string]Destination{
		"slow": {Transport: slow.transport(t), Timeout: time.Hour},
		"fast": {Transport: fast.transport(t), Timeout: time.Hour},
	})
	rn := e.start(cfg)
	rn.waitFor("the fast destination's backlog", func() bool {
		return rn.r.Stats().Destinations["fast"].Delivered == int64(len(fastMsgs))
	})
	st := rn.r.Stats()
	if n := st.Destinations["slow"].Delivered; n != 0 {
		t.Fatalf("%d deliveries to a receiver that holds every request", n)
	}
	if n, most := slow.received.Load(), int64(DefaultWorkers-DefaultWorkers/4); n > most {
		t.Fatalf("the hanging receiver holds %d requests, want at most %d", n, most)
	}
	if got := fast.received.Load(); got != int64(len(fastMsgs)) {
		t.Fatalf("the fast receiver got %d requests for %d messages", got, len(fastMsgs))
	}
	close(hang)
	rn.waitFor("every message", func() bool { return rn.r.Stats().Delivered == int64(len(slowMsgs)+len(fastMsgs)) })
}
