package config

import (
	"strings"
	"testing"
)

// A zero written for a key whose default applies when it is left out is
// refused (timeout: 0s must not become 30 s without a word), and a YAML
// alias is checked as what it stands for: timeout: *zero, an alias of a
// 0s anchored on a key where 0 is allowed (store.retention), was taken
// and silently replaced by the default.
func TestZeroThroughAnAliasIsRefused(t *testing.T) {
	y := "store:\n  retention: &z 0s\nrelay:\n  shutdown_timeout: *z\n" +
		"destinations:\n  - name: a\n    type: webhook\n    url: http://127.0.0.1:9/\n    timeout: *z\n"
	c, err := Parse([]byte(y), env(nil))
	if err == nil {
		t.Fatalf("Parse = ok (relay.shutdown_timeout %v, destinations[0].timeout %v), want the aliased zeros refused",
			c.Relay.ShutdownTimeout.D(), c.Destinations[0].Timeout.D())
	}
	for _, want := range []string{"line 4: relay.shutdown_timeout: must be more than 0", "line 9: destinations[0].timeout: must be more than 0"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Parse = %v, want it to say %q", err, want)
		}
	}
	// The anchor's own key takes its zero.
	if _, err := Parse([]byte("store:\n  retention: &z 0s\ndestinations:\n  - {name: a, type: webhook, url: 'http://127.0.0.1:9/'}\n"), env(nil)); err != nil {
		t.Fatal(err)
	}
}
