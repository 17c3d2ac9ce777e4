package config

import (
	"strings"
	"testing"
)

// A token no HTTP request can carry is refused naming its key and line:
// a server trims the white space around a header's value, so a token
// ending in a space, a tab or a newline (a secret read from a file with
// its newline, as a mounted Kubernetes secret often is) never matched,
// and every request got 401; a control character cannot be sent at all.
func TestTokenNoRequestCanCarryIsRefused(t *testing.T) {
	for _, tok := range []string{"operate-token-0123456 ", "operate-token-0123456\n", "operate-token-0123456\t", "operate-token\x00-0123456", "operate-token\r-0123456"} {
		_, err := Parse([]byte("tokens:\n  - name: ops\n    token: ${TOK}\n"+hostileBase), env(map[string]string{"TOK": tok}))
		if err == nil || !strings.Contains(err.Error(), "line 3: tokens[0].token") {
			t.Errorf("token %q: %v, want an error naming tokens[0].token on line 3", tok, err)
		}
	}
	for _, tok := range []string{" operate-token-0123456", "operate token 0123456", "opérate-token-0123456"} {
		if _, err := Parse([]byte("tokens:\n  - name: ops\n    token: ${TOK}\n"+hostileBase), env(map[string]string{"TOK": tok})); err != nil {
			t.Errorf("token %q, which a request carries: %v", tok, err)
		}
	}
}
