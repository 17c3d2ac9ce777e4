package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/backstophq/backstop/internal/testenv"
	"github.com/backstophq/backstop/transport/webhook"
)

// forwarded is one request the webhook destination accepted.
type forwarded struct {
	id, typ, stream, body string
}

// hookRecorder is a webhook destination that records what it accepted
// and signals each request.
type hookRecorder struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []forwarded
	hit chan forwarded
}

func newHookRecorder(t *testing.T) *hookRecorder {
	h := &hookRecorder{hit: make(chan forwarded, 100)}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f := forwarded{id: r.Header.Get(webhook.HeaderMessageID), typ: r.Header.Get(webhook.HeaderType),
			stream: r.Header.Get(webhook.HeaderStream), body: string(body)}
		h.mu.Lock()
		h.got = append(h.got, f)
		h.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
		h.hit <- f
	}))
	t.Cleanup(h.srv.Close)
	return h
}

// await waits for the next request, at most 30 s.
func (h *hookRecorder) await(t *testing.T, what string) forwarded {
	t.Helper()
	select {
	case f := <-h.hit:
		return f
	case <-time.After(30 * time.Second):
		t.Fatalf("gave up waiting for %s at the webhook destination", what)
		return forwarded{}
	}
}

// natsSource connects to the test server and makes a stream of the
// rabbitQueue declares a queue of its own on the test broker, deleted
// when the test ends, and returns a channel to it.
func rabbitQueue(t *testing.T) (*amqp.Channel, string) {
	t.Helper()
	conn, err := amqp.DialConfig(testenv.AMQPURL(), amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
	if err != nil {
		testenv.Unreachable(t, "RabbitMQ at "+testenv.AMQPURL(), testenv.AMQPEnv, err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	queue := "servetest_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	if _, err := ch.QueueDeclare(queue, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ch.QueueDelete(queue, false, false, false); ch.Close() })
	return ch, queue
}

// test's own, deleted when the test ends; its subjects are <prefix>.>.
func natsSource(t *testing.T) (js jetstream.JetStream, stream, prefix string) {
	t.Helper()
	nc, err := nats.Connect(testenv.NATSURL(), nats.Timeout(2*time.Second))
	if err == nil {
		js, err = jetstream.New(nc)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err == nil {
		_, err = js.AccountInfo(ctx)
	}
	if err != nil {
		if nc != nil {
			nc.Close()
		}
		testenv.Unreachable(t, "NATS JetStream at "+testenv.NATSURL(), testenv.NATSEnv, err)
	}
	t.Cleanup(nc.Close)
	prefix = "servetest_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	stream = strings.ToUpper(prefix)
	// The least duplicate window JetStream allows, so that the test can
	// store one message id twice, as a publisher retrying later would.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{prefix + ".>"},
		Storage: jetstream.MemoryStorage, Duplicates: 100 * time.Millisecond}); err != nil {
		t.Fatalf("create stream: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, stream)
	})
	return js, stream, prefix
}

// publishNATS stores a message in the stream; again, it retries while
// JetStream drops the id as a duplicate of the first copy (for its
// 100 ms window), so that the stream holds the message twice.
func publishNATS(t *testing.T, js jetstream.JetStream, subject, id, body string, again bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m := nats.NewMsg(subject)
	m.Header.Set(jetstream.MsgIDHeader, id)
	m.Header.Set("Backstop-Type", "order.created")
	m.Header.Set("X-Tenant", "acme")
	m.Data = []byte(body)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ack, err := js.PublishMsg(ctx, m)
		if err != nil {
			t.Fatalf("publish %s: %v", id, err)
		}
		if !again || !ack.Duplicate {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("publish %s again: %v", id, ctx.Err())
		case <-tick.C:
		}
	}
}

const partnerSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// postSigned sends a Standard Webhooks request to the http source and
// returns the status.
func postSigned(t *testing.T, url, id, typ, partner, body string) int {
	t.Helper()
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	sig, err := webhook.Sign([]byte(partnerSecret), id, ts, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader([]byte(body)))
	req.Header.Set(webhook.HeaderMessageID, id)
	req.Header.Set(webhook.HeaderTimestamp, ts)
	req.Header.Set(webhook.HeaderSignature, sig)
	req.Header.Set(webhook.HeaderType, typ)
	req.Header.Set("X-Partner", partner)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestServeSources runs serve with a NATS source and an http source,
// both forwarding to a webhook destination, and has each source deliver
// a message twice: each arrives once, with its stream key, in order.
func TestServeSources(t *testing.T) {
	forEachDB(t, testServeSources)
}

// forEachDB runs test with a --db on SQLite, then on PostgreSQL in a
// schema of the test's own (its search_path).
func forEachDB(t *testing.T, test func(t *testing.T, db string)) {
	t.Run("sqlite", func(t *testing.T) { test(t, "sqlite:"+filepath.Join(t.TempDir(), "b.db")) })
	t.Run("postgres", func(t *testing.T) {
		testenv.PostgresAdmin(t)
		test(t, withSearchPath(testenv.PostgresURL(), testenv.NewSchema(t, "db_")))
	})
}

func testServeSources(t *testing.T, db string) {
	js, stream, prefix := natsSource(t)
	hook := newHookRecorder(t)
	cl, base := startServe(t, fmt.Sprintf(`listen: 127.0.0.1:0
db: '%s'
relay: {poll_interval: 20ms}
destinations:
  - name: partner-hook
    type: webhook
    url: %s
    inner_retry: {attempts: 1}
sources:
  - inbox: orders
    type: nats
    url: %s
    stream: %s
    consumer: backstop
    stream_key: subject
    forward: {to: [partner-hook]}
  - inbox: partners
    type: http
    path: /inbox/partners
    secret: %s
    stream_key: header:X-Partner
    forward: {to: [partner-hook]}
tokens:
  - {name: ops, token: operate-token-0123456789, role: operate}
`, db, hook.srv.URL, testenv.NATSURL(), stream, partnerSecret))

	// NATS: a, then a again (the stream holds it twice, so the consumer
	// delivers it twice), then b on the same subject. With the subject as
	// the stream key the order is strict end to end: once b arrives, a
	// second a would have arrived before it.
	subject := prefix + ".orders.eu"
	publishNATS(t, js, subject, "a", `{"n":1}`, false)
	if f := hook.await(t, "a"); f.typ != "order.created" || f.stream != subject || f.body != `{"n":1}` {
		t.Errorf("forwarded %+v, want order.created on stream %s with its payload", f, subject)
	}
	publishNATS(t, js, subject, "a", `{"n":1}`, true)
	publishNATS(t, js, subject, "b", `{"n":2}`, false)
	if f := hook.await(t, "b"); f.body != `{"n":2}` {
		t.Errorf("after a came %+v, want b: a was forwarded twice", f)
	}

	// HTTP: p1, p1 again (a sender retrying after a lost answer), p2.
	url := base + "/inbox/partners"
	for _, tc := range []struct {
		id   string
		want int
	}{{"p1", http.StatusAccepted}, {"p1", http.StatusOK}, {"p2", http.StatusAccepted}} {
		if got := postSigned(t, url, tc.id, "partner.joined", "acme", `{"id":"`+tc.id+`"}`); got != tc.want {
			t.Errorf("POST %s: %d, want %d", tc.id, got, tc.want)
		}
	}
	if got := postSigned(t, url, "p3", "partner.joined", "acme", `{}`); got != http.StatusAccepted {
		t.Errorf("POST p3: %d", got)
	}
	for _, want := range []string{"p1", "p2", "p3"} {
		f := hook.await(t, want)
		if f.typ != "partner.joined" || f.stream != "acme" || (want != "p3" && f.body != `{"id":"`+want+`"}`) {
			t.Errorf("forwarded %+v, want %s of stream acme", f, want)
		}
	}
	hook.mu.Lock()
	n := len(hook.got)
	hook.mu.Unlock()
	if n != 5 {
		t.Errorf("the webhook destination accepted %d requests, want 5 (a, b, p1, p2, p3)", n)
	}

	// What the inboxes did is on /metrics and in the admin API.
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`backstop_inbox_received_total{inbox="orders",source="nats"} 2`,
		`backstop_inbox_duplicates_total{inbox="orders",source="nats"} 1`,
		`backstop_inbox_received_total{inbox="partners",source="http"} 3`,
		`backstop_inbox_duplicates_total{inbox="partners",source="http"} 1`,
		`backstop_delivered_total{destination="inbox:orders"}`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	b, err := cl.Breakers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, br := range b.Items {
		names = append(names, br.Destination)
	}
	if got := strings.Join(names, ","); got != "inbox:orders,inbox:partners,partner-hook" {
		t.Errorf("breakers of %s, want the inboxes' and the destination's", got)
	}
}

// TestServeRabbitMQSource runs serve with a RabbitMQ source forwarding to
// a webhook destination; the queue holds one message twice (a publisher
// retrying): it arrives once, on the stream of its routing key.
func TestServeRabbitMQSource(t *testing.T) {
	forEachDB(t, testServeRabbitMQSource)
}

func testServeRabbitMQSource(t *testing.T, db string) {
	ch, queue := rabbitQueue(t)
	ctx := context.Background()
	for _, id := range []string{"r1", "r1", "r2"} {
		if err := ch.PublishWithContext(ctx, "", queue, false, false, amqp.Publishing{MessageId: id, Type: "payment.settled",
			Body: []byte(`{"id":"` + id + `"}`)}); err != nil {
			t.Fatal(err)
		}
	}
	hook := newHookRecorder(t)
	_, base := startServe(t, fmt.Sprintf(`listen: 127.0.0.1:0
db: '%s'
relay: {poll_interval: 20ms}
destinations:
  - {name: ledger, type: webhook, url: '%s', inner_retry: {attempts: 1}}
sources:
  - inbox: payments
    type: rabbitmq
    url: %s
    queue: %s
    stream_key: routing_key
    forward: {to: [ledger]}
`, db, hook.srv.URL, testenv.AMQPURL(), queue))
	for _, want := range []string{"r1", "r2"} {
		// r2 comes after both copies of r1 in the queue and in the
		// stream: a second r1 would arrive before it.
		if f := hook.await(t, want); f.body != `{"id":"`+want+`"}` || f.stream != queue || f.typ != "payment.settled" {
			t.Errorf("forwarded %+v, want %s of stream %s", f, want, queue)
		}
	}
	// /readyz covers the source's broker connection: ready while it
	// consumes, not ready, naming the source and why, once its queue is
	// gone (its consumer cancelled).
	awaitReadyz(t, base, "", http.StatusOK, "")
	if _, err := ch.QueueDelete(queue, false, false, false); err != nil {
		t.Fatal(err)
	}
	awaitReadyz(t, base, "", http.StatusServiceUnavailable, "source:payments")
	awaitReadyz(t, base, "?exclude=sources", http.StatusOK, "")
}

// awaitReadyz waits, at most 30 s, for serve's /readyz (with query) to
// answer code and, when failing is set, to name that check among the
// failed ones, with a reason.
func awaitReadyz(t *testing.T, base, query string, code int, failing string) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	var last string
	for {
		resp, err := http.Get(base + "/readyz" + query)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		last = fmt.Sprintf("%d %s", resp.StatusCode, body)
		var got struct {
			Checks []checkResult `json:"checks"`
		}
		_ = json.Unmarshal(body, &got)
		named := failing == ""
		for _, c := range got.Checks {
			if c.Name == failing && !c.OK && c.Error != "" {
				named = true
			}
		}
		if resp.StatusCode == code && named {
			return
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("/readyz%s never answered %d naming %q; last: %s", query, code, failing, last)
		}
	}
}

// TestServeHTTPSourceOwnAddress runs an http source on an address of its
// own: a signed request is forwarded, an unsigned one refused.
func TestServeHTTPSourceOwnAddress(t *testing.T) {
	hook := newHookRecorder(t)
	addr := "127.0.0.1:" + freePort(t)
	startServe(t, fmt.Sprintf(`listen: 127.0.0.1:0
db: sqlite:%s
relay: {poll_interval: 20ms}
destinations:
  - {name: crm, type: webhook, url: '%s', inner_retry: {attempts: 1}}
sources:
  - inbox: signups
    type: http
    listen: %s
    secret: %s
    headers: [Content-Type, X-Partner]
    forward: {to: [crm]}
`, filepath.Join(t.TempDir(), "b.db"), hook.srv.URL, addr, partnerSecret))
	if got := postSigned(t, "http://"+addr+"/", "s1", "signup.created", "acme", `{"id":"s1"}`); got != http.StatusAccepted {
		t.Fatalf("signed POST: %d, want 202", got)
	}
	resp, err := http.Post("http://"+addr+"/", "application/json", strings.NewReader(`{"type":"signup.created"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("unsigned POST: %d, want 401", resp.StatusCode)
	}
	if f := hook.await(t, "s1"); f.body != `{"id":"s1"}` || f.typ != "signup.created" || f.stream != "" {
		t.Errorf("forwarded %+v, want s1 without a stream (no Backstop-Stream sent)", f)
	}
}
