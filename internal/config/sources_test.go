package config

import (
	"strings"
	"testing"
	"time"

	"github.com/backstophq/backstop/outbox"
)

const sourcesBase = `destinations:
  - {name: warehouse, type: webhook, url: 'http://127.0.0.1:9000/hook'}
`

const sourcesFull = sourcesBase + `sources:
  - inbox: orders
    type: nats
    url: nats://127.0.0.1:4222
    stream: ORDERS
    consumer: backstop-orders
    subject: "orders.>"
    stream_key: subject
    dedup_window: 24h
    forward: {to: [warehouse]}
  - inbox: payments
    type: rabbitmq
    url: amqp://guest:guest@127.0.0.1:5672/
    queue: payments
    stream_key: header:X-Account
    forward: {to: [warehouse]}
  - inbox: partners
    type: http
    path: /inbox/partners
    secret: ${PARTNER_SECRET}
    forward: {to: [warehouse]}
  - inbox: partners-2
    type: http
    listen: 127.0.0.1:9100
    secret: whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw
    additional_secrets: [whsec_bm90LWEtcmVhbC1zZWNyZXQtMDEyMzQ1Njc4OQ==]
    tolerance: 1m
    headers: [Content-Type, X-Partner]
    stream_key: none
    forward: {to: [warehouse]}
`

func TestParseSources(t *testing.T) {
	c, err := Parse([]byte(sourcesFull), env(map[string]string{"PARTNER_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}))
	if err != nil {
		t.Fatal(err)
	}
	n, r, h, own := c.Sources[0], c.Sources[1], c.Sources[2], c.Sources[3]
	if n.AckWait.D() != DefaultAckWait || n.DedupWindow.D() != 24*time.Hour || n.StreamKey != "subject" {
		t.Errorf("nats source %+v", n)
	}
	if k, name := r.StreamKeyOf(); k != "header" || name != "X-Account" || r.Prefetch != 1 || r.DedupWindow.D() != DefaultDedupWindow {
		t.Errorf("rabbitmq source %+v", r)
	}
	if h.StreamKey != DefaultStreamKey || h.Tolerance.D() != 5*time.Minute || h.Secret == "" {
		t.Errorf("http source %+v", h)
	}
	if own.Path != "/" || len(own.Secrets()) != 2 {
		t.Errorf("http source with its own address %+v", own)
	}
	if p, ok := c.StoreConfig().Policies["inbox:orders"]; !ok || p.Ordering != outbox.OrderingStrict {
		t.Errorf("inbox:orders policy %+v, %v", p, ok)
	}
	sum := c.Summary()
	for _, want := range []string{"source orders: nats", "source payments: rabbitmq amqp://guest:***@", "-> forward to warehouse"} {
		if !strings.Contains(sum, want) {
			t.Errorf("summary lacks %q:\n%s", want, sum)
		}
	}
}

// A source may forward to the routes' fan-out when there are routes.
func TestParseSourceForwardsToTopic(t *testing.T) {
	src := "sources:\n  - {inbox: a, type: rabbitmq, url: 'amqp://x/', queue: q, forward: {to: [topic]}}\n"
	if _, err := Parse([]byte(sourcesBase+"routes:\n  - {topic: '*', to: [warehouse]}\n"+src), env(nil)); err != nil {
		t.Errorf("forward to topic with routes: %v", err)
	}
	if _, err := Parse([]byte(sourcesBase+src), env(nil)); err == nil || !strings.Contains(err.Error(), `sources[0].forward.to[0]: unknown destination "topic"`) {
		t.Errorf("forward to topic without routes: %v", err)
	}
}

// Each bad source is refused with an error naming the key and its line.
func TestParseRefusesSources(t *testing.T) {
	nats := sourcesBase + "sources:\n  - inbox: orders\n    type: nats\n    url: nats://127.0.0.1:4222\n    stream: ORDERS\n    consumer: c\n    forward: {to: [warehouse]}\n"
	hook := sourcesBase + "sources:\n  - inbox: orders\n    type: http\n    secret: whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n    forward: {to: [warehouse]}\n"
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"unknown key", nats + "    ack_wiat: 5s\n", []string{"line 10", "sources[0].ack_wiat", "unknown key", "did you mean ack_wait"}},
		{"unknown forward key", nats + "    forward: {too: [warehouse]}\n", []string{"sources[0].forward.too", "unknown key"}},
		{"no inbox", sourcesBase + "sources:\n  - {type: rabbitmq, url: 'amqp://x/', queue: q, forward: {to: [warehouse]}}\n", []string{"line 4", "sources[0].inbox", "is required"}},
		{"bad inbox", sourcesBase + "sources:\n  - {inbox: 'a b', type: rabbitmq, url: 'amqp://x/', queue: q, forward: {to: [warehouse]}}\n", []string{"sources[0].inbox", "a-z"}},
		{"twice", nats + "  - {inbox: orders, type: rabbitmq, url: 'amqp://x/', queue: q, forward: {to: [warehouse]}}\n", []string{"line 10", "sources[1].inbox", "named twice"}},
		{"bad type", sourcesBase + "sources:\n  - {inbox: a, type: kafka, forward: {to: [warehouse]}}\n", []string{"sources[0].type", "kafka"}},
		{"nats without stream", sourcesBase + "sources:\n  - {inbox: a, type: nats, url: 'nats://x:1', consumer: c, forward: {to: [warehouse]}}\n", []string{"sources[0].stream", "required for a nats source"}},
		{"rabbitmq without queue", sourcesBase + "sources:\n  - {inbox: a, type: rabbitmq, url: 'amqp://x/', forward: {to: [warehouse]}}\n", []string{"sources[0].queue", "required"}},
		{"another kind's key", nats + "    queue: q\n", []string{"line 10", "sources[0].queue", "not a setting of a nats source"}},
		{"scheme", sourcesBase + "sources:\n  - {inbox: a, type: rabbitmq, url: 'nats://x:1', queue: q, forward: {to: [warehouse]}}\n", []string{"sources[0].url", "scheme"}},
		{"no forward", sourcesBase + "sources:\n  - {inbox: a, type: rabbitmq, url: 'amqp://x/', queue: q}\n", []string{"sources[0].forward.to", "names no destination"}},
		{"unknown forward target", nats + "  - {inbox: b, type: rabbitmq, url: 'amqp://x/', queue: q, forward: {to: [nowhere]}}\n", []string{"line 10", "sources[1].forward.to[0]", `unknown destination "nowhere"`}},
		{"bad stream key", nats + "    stream_key: headers\n", []string{"line 10", "sources[0].stream_key", "header:<Name>"}},
		{"subject on rabbitmq", sourcesBase + "sources:\n  - {inbox: a, type: rabbitmq, url: 'amqp://x/', queue: q, stream_key: subject, forward: {to: [warehouse]}}\n", []string{"sources[0].stream_key", "routing_key"}},
		{"http without secret", sourcesBase + "sources:\n  - {inbox: a, type: http, path: /in, forward: {to: [warehouse]}}\n", []string{"sources[0].secret", "required"}},
		{"http without path", hook, []string{"sources[0].path", "required"}},
		{"reserved path", hook + "    path: /v1/in\n", []string{"sources[0].path", "server's own"}},
		{"dashboard path", hook + "    path: /\n", []string{"sources[0].path", "server's own"}},
		{"same path", hook + "    path: /in\n  - {inbox: b, type: http, path: /in, secret: abc, forward: {to: [warehouse]}}\n", []string{"sources[1].path", "sources[0]'s path"}},
		{"bad secret", hook + "    path: /in\n    additional_secrets: [whsec_!!]\n", []string{"sources[0].additional_secrets[0]"}},
		{"missing env", hook + "    path: /in\n    additional_secrets: [\"${NOPE}\"]\n", []string{"line 9", "sources[0].additional_secrets[0]", "NOPE is not set"}},
		{"forwarded twice", nats + "  - {inbox: b, type: rabbitmq, url: 'amqp://x/', queue: q, forward: {to: [warehouse, warehouse]}}\n", []string{"sources[1].forward.to[1]", "named twice"}},
		{"dedup window under the tolerance", hook + "    path: /in\n    dedup_window: 1s\n", []string{"sources[0].dedup_window", "twice the tolerance (5m0s)"}},
		{"dedup window under a longer tolerance", hook + "    path: /in\n    dedup_window: 90m\n    tolerance: 1h\n", []string{"sources[0].dedup_window", "replayed"}},
		{"ack wait over the dedup window", nats + "    ack_wait: 2h\n    dedup_window: 1h\n", []string{"sources[0].ack_wait", "dedup_window (1h0m0s)"}},
		{"dedup window under a minute", nats + "    dedup_window: 30s\n", []string{"sources[0].dedup_window", "at least 1m0s"}},
		{"prefetch over an AMQP short", sourcesBase + "sources:\n  - {inbox: a, type: rabbitmq, url: 'amqp://x/', queue: q, prefetch: 65536, forward: {to: [warehouse]}}\n", []string{"sources[0].prefetch", "65535"}},
		{"inbox's destination taken", "destinations:\n  - {name: 'inbox:a', type: webhook, url: 'http://x/'}\nsources:\n  - {inbox: a, type: rabbitmq, url: 'amqp://x/', queue: q, forward: {to: ['inbox:a']}}\n", []string{"sources[0].inbox", "rename the destination"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), env(nil))
			if err == nil {
				t.Fatalf("accepted:\n%s", tc.yaml)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}
