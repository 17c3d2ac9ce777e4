package config

import (
	"strings"
	"testing"
)

// What serve cannot start with is refused by the config, naming the key
// and its line: a port past 65535 (serve failed at its listen, naming no
// key) and a sqlite: without a path (serve named --db, a flag it has not).
func TestListenPortAndSQLitePathAreChecked(t *testing.T) {
	for _, tc := range []struct{ yaml, key string }{
		{"listen: 127.0.0.1:99999\n", "line 1: listen"},
		{"listen: 127.0.0.1:-1\n", "line 1: listen"},
		{"db: \"sqlite:\"\n", "line 1: db"},
	} {
		if _, err := Parse([]byte(tc.yaml+hostileBase), env(nil)); err == nil || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%q: %v, want an error naming %s", tc.yaml, err, tc.key)
		}
	}
	for _, l := range []string{"127.0.0.1:0", ":8080", "[::1]:65535", "localhost:http"} {
		if _, err := Parse([]byte("listen: \""+l+"\"\n"+hostileBase), env(nil)); err != nil {
			t.Errorf("listen %q: %v", l, err)
		}
	}
}
