package config

import (
	"strings"
	"testing"
)

// A NATS or RabbitMQ URL whose port is out of range (nats://host:99999)
// passed config check and serve started: the transports and the NATS
// source took the dial's "invalid port" for a server that cannot be
// reached yet, and waited for it for ever, their messages held and the
// source not ready. A webhook's URL with such a port is refused; so are
// these, naming the key and its line.
func TestBrokerURLWithAPortOutOfRangeIsRefused(t *testing.T) {
	const head = "destinations:\n  - {name: w, type: webhook, url: 'http://127.0.0.1:9/'}\n"
	for _, tc := range []struct{ yaml, key string }{
		{head + "  - name: a\n    type: nats\n    url: nats://127.0.0.1:99999\n", "destinations[1].url"},
		{head + "  - name: a\n    type: nats\n    url: nats://127.0.0.1:4222,nats://127.0.0.1:70000\n", "destinations[1].url"},
		{head + "  - name: a\n    type: rabbitmq\n    url: amqp://guest:guest@127.0.0.1:99999/\n", "destinations[1].url"},
		{head + "  - name: a\n    type: nats\n    url: nats://127.0.0.1:0\n", "destinations[1].url"},
		{head + "sources:\n  - inbox: in\n    type: nats\n    url: nats://127.0.0.1:99999\n    stream: S\n    consumer: c\n    forward: {to: [w]}\n", "sources[0].url"},
		{head + "sources:\n  - inbox: in\n    type: rabbitmq\n    url: amqp://127.0.0.1:65536/\n    queue: q\n    forward: {to: [w]}\n", "sources[0].url"},
	} {
		_, err := Parse([]byte(tc.yaml), env(nil))
		if err == nil || !strings.Contains(err.Error(), tc.key+": has port") || !strings.Contains(err.Error(), "line ") {
			t.Errorf("%s: Parse = %v, want %s refused for its port, with its line", tc.yaml, err, tc.key)
		}
	}
	for _, y := range []string{
		head + "  - {name: a, type: nats, url: 'nats://127.0.0.1:4222,nats://127.0.0.1:4223'}\n",
		head + "  - {name: a, type: nats, url: 'nats://127.0.0.1'}\n",
		head + "  - {name: a, type: rabbitmq, url: 'amqp://guest:guest@127.0.0.1:5672/'}\n",
	} {
		if _, err := Parse([]byte(y), env(nil)); err != nil {
			t.Errorf("%s: %v", y, err)
		}
	}
}
