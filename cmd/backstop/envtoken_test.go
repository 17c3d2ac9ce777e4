package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/backstophq/backstop/admin"
	"github.com/backstophq/backstop/internal/config"
)

// BACKSTOP_ADMIN_TOKEN is held to the config's rules for tokens: a short
// one opened a listener beyond loopback with a 1-character operate token,
// and one equal to a read token was silently read-only.
func TestEnvironmentTokenFollowsTheConfigsRules(t *testing.T) {
	c := &config.Config{Tokens: []config.Token{{Name: "dash", Token: "read-only-token-0123456789", Role: admin.RoleRead}}}
	for _, tc := range []struct{ env, want string }{
		{"a", "at least 16 characters"},
		{"read-only-token-0123456789", `the same as the config's token "dash"`},
	} {
		t.Setenv("BACKSTOP_ADMIN_TOKEN", tc.env)
		if _, err := tokensOf(c); err == nil || !strings.Contains(err.Error(), "BACKSTOP_ADMIN_TOKEN") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("BACKSTOP_ADMIN_TOKEN=%q: %v, want an error naming it and %q", tc.env, err, tc.want)
		}
		if err := serve(t.Context(), &config.Config{Listen: "0.0.0.0:0", Tokens: c.Tokens}, nil, nil); err == nil ||
			!strings.Contains(err.Error(), "BACKSTOP_ADMIN_TOKEN") {
			t.Errorf("serve with BACKSTOP_ADMIN_TOKEN=%q: %v, want a refusal naming it", tc.env, err)
		}
	}
	t.Setenv("BACKSTOP_ADMIN_TOKEN", "an-operate-token-0123456789")
	toks, err := tokensOf(c)
	if err != nil || len(toks) != 2 || toks[1].Name != "env" || toks[1].Role != admin.RoleOperate {
		t.Fatalf("a valid environment token: %+v, %v", toks, err)
	}
}

// config check says what serve does with BACKSTOP_ADMIN_TOKEN: it counted
// only the config's tokens (0 tokens while serve would take the
// environment's), and passed one serve refuses.
func TestConfigCheckTakesTheEnvironmentToken(t *testing.T) {
	path := filepath.Join(t.TempDir(), "backstop.yaml")
	if err := os.WriteFile(path, []byte("destinations:\n  - {name: hook, type: webhook, url: 'http://127.0.0.1:9/y'}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("BACKSTOP_ADMIN_TOKEN", "short")
	if _, err := cli(t, "config", "check", path); err == nil || !strings.Contains(err.Error(), "BACKSTOP_ADMIN_TOKEN") {
		t.Fatalf("config check with a short BACKSTOP_ADMIN_TOKEN: %v, want the refusal serve gives", err)
	}
	t.Setenv("BACKSTOP_ADMIN_TOKEN", "an-operate-token-0123456789")
	if out := mustCLI(t, "config", "check", path); !strings.Contains(out, "BACKSTOP_ADMIN_TOKEN: an operate token named env") {
		t.Fatalf("config check with BACKSTOP_ADMIN_TOKEN set:\n%s", out)
	}
}

// BACKSTOP_ADMIN_TOKEN with a trailing newline (read from a file) or
// another character no request can carry at its end is refused naming
// it: every request got 401.
func TestEnvironmentTokenNoRequestCanCarry(t *testing.T) {
	for _, v := range []string{"an-operate-token-0123456789\n", "an-operate-token-0123456789 "} {
		t.Setenv("BACKSTOP_ADMIN_TOKEN", v)
		if _, err := tokensOf(&config.Config{}); err == nil || !strings.Contains(err.Error(), "BACKSTOP_ADMIN_TOKEN") {
			t.Errorf("BACKSTOP_ADMIN_TOKEN=%q: %v, want a refusal naming it", v, err)
		}
	}
}

// A config token named env beside BACKSTOP_ADMIN_TOKEN's (named env too):
// the audit log could not tell the two apart, and admin.New refused the
// pair naming a Config.Tokens index no file has.
func TestEnvironmentTokenNameIsItsOwn(t *testing.T) {
	t.Setenv("BACKSTOP_ADMIN_TOKEN", "an-operate-token-0123456789")
	c := &config.Config{Tokens: []config.Token{{Name: "env", Token: "read-only-token-0123456789", Role: admin.RoleRead}}}
	if _, err := tokensOf(c); err == nil || !strings.Contains(err.Error(), "BACKSTOP_ADMIN_TOKEN") || !strings.Contains(err.Error(), `"env"`) {
		t.Fatalf("tokensOf = %v, want a refusal naming BACKSTOP_ADMIN_TOKEN and the name env", err)
	}
}
