package config

import (
	"strings"
	"testing"
)

// A NATS source's consumer or stream name, or a NATS destination's stream,
// holding a character the client refuses ('/', '\', a carriage return)
// passed config check; serve then refused it (or, with the server down at
// its start, a destination's stream was never checked and each publish,
// expecting that stream, was refused for ever as a fault of the
// destination). Refused here, naming the key and its line.
func TestNATSNameTheClientRefusesIsRefused(t *testing.T) {
	const head = "destinations:\n  - {name: w, type: webhook, url: 'http://127.0.0.1:9/'}\n"
	src := func(stream, consumer string) string {
		return head + "sources:\n  - inbox: in\n    type: nats\n    url: nats://127.0.0.1:4222\n" +
			"    stream: \"" + stream + "\"\n    consumer: \"" + consumer + "\"\n    forward: {to: [w]}\n"
	}
	for _, tc := range []struct{ yaml, key string }{
		{src("S", "c/1"), "line 8: sources[0].consumer:"},
		{src("S", `c\\1`), "line 8: sources[0].consumer:"},
		{src("S", `c1\r`), "line 8: sources[0].consumer:"},
		{src("S/1", "c"), "line 7: sources[0].stream:"},
		{src("S.1", "c"), "line 7: sources[0].stream:"},
		{head + "  - name: a\n    type: nats\n    url: nats://127.0.0.1:4222\n    stream: \"A/B\"\n", "line 6: destinations[1].stream:"},
	} {
		_, err := Parse([]byte(tc.yaml), env(nil))
		if err == nil || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%s: Parse = %v, want %q", tc.yaml, err, tc.key)
		}
	}
	if _, err := Parse([]byte(src("ORDERS-eu_1", "backstop-orders_1")), env(nil)); err != nil {
		t.Error(err)
	}
}
