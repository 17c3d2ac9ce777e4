package config

import (
	"strings"
	"testing"
)

// An http source whose own listen address is the server's, spelt another
// way (localhost for 127.0.0.1, or the server on every address), passed
// config check; serve then stopped at its start with "listen tcp
// 127.0.0.1:18085: bind: address already in use", naming no key. Refused
// as the same address spelt alike is.
func TestSourceListenOnTheServersAddressSpeltAnotherWayIsRefused(t *testing.T) {
	cfg := func(listen, srcListen string) string {
		return "listen: \"" + listen + "\"\ntokens: [{name: ops, token: 0123456789abcdef0123}]\n" +
			"destinations:\n  - {name: w, type: webhook, url: 'http://127.0.0.1:9/'}\n" +
			"sources:\n  - inbox: in\n    type: http\n    listen: \"" + srcListen + "\"\n    secret: 0123456789abcdef0123456789\n    forward: {to: [w]}\n"
	}
	for _, tc := range [][2]string{
		{"localhost:18085", "127.0.0.1:18085"},
		{"127.0.0.1:18085", "localhost:18085"},
		{":18085", "127.0.0.1:18085"},
		{"0.0.0.0:18085", "localhost:18085"},
		{"[::1]:18085", "[0:0:0:0:0:0:0:1]:18085"},
	} {
		_, err := Parse([]byte(cfg(tc[0], tc[1])), env(nil))
		if err == nil || !strings.Contains(err.Error(), "line 8: sources[0].listen: is the server's own listen address") {
			t.Errorf("listen %s, source listen %s: Parse = %v, want sources[0].listen refused", tc[0], tc[1], err)
		}
	}
	for _, tc := range [][2]string{
		{"127.0.0.1:18085", "127.0.0.1:18086"},
		{"127.0.0.1:18085", "127.0.0.2:18085"},
		{"127.0.0.1:0", "localhost:0"},
	} {
		if _, err := Parse([]byte(cfg(tc[0], tc[1])), env(nil)); err != nil {
			t.Errorf("listen %s, source listen %s: %v", tc[0], tc[1], err)
		}
	}
}
